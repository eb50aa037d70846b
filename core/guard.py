"""The settings guard: every change to a GPU setting goes through here, and is undone on every exit.

Before the first change of a setting on a device, the guard records the original value in memory and in
a small on-disk journal (one JSON file per process, written atomically and fsynced). It restores the
originals on a normal end (`restore_all`, the context manager, `atexit`), on an exception, on
SIGTERM/SIGINT (`install_signal_handlers`), and, after a SIGKILL or a power loss, at the next start
(`recover_stale_journals`, run by every guard when it starts and by `wattwise restore`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from wattwise.devices.base import Device, DeviceError
from wattwise.paths import state_dir

log = logging.getLogger(__name__)

POWER_LIMIT = "power_limit_w"
SM_CLOCKS = "locked_sm_clocks_mhz"


def journal_dir() -> Path:
    return state_dir() / "journal"


@dataclass
class RestoreResult:
    """What a restore did: settings put back, and the ones that could not be (with the reason)."""

    restored: list[str]
    failed: list[str]


def _fsync_write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _apply(device: Device, setting: str, value: Any) -> None:
    if setting == POWER_LIMIT:
        device.set_power_limit_w(float(value))
    elif setting == SM_CLOCKS:
        if value is None:
            device.reset_sm_clocks()
        else:
            device.lock_sm_clocks_mhz(int(value[0]), int(value[1]))
    else:
        raise DeviceError(f"unknown setting {setting!r} in the journal")


def _describe(spec: dict[str, Any], setting: str, value: Any) -> str:
    return f"{spec.get('backend')} device {spec.get('index')}: {setting} -> {value}"


class SettingsGuard:
    """Records original GPU settings before changing them, and restores them on every exit path."""

    def __init__(self, journal_directory: str | os.PathLike[str] | None = None, *, recover: bool = True):
        self.journal_dir = Path(journal_directory) if journal_directory is not None else journal_dir()
        self.journal_path = self.journal_dir / (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self._lock = threading.RLock()
        self._devices: dict[str, Device] = {}
        self._originals: dict[tuple[str, str], Any] = {}
        self._specs: dict[str, dict[str, Any]] = {}
        self._previous_handlers: dict[int, Any] = {}
        self._atexit = False
        if recover:
            result = recover_stale_journals(self.journal_dir)
            for line in result.restored:
                log.warning("wattwise: restored a setting left changed by a process that died: %s", line)
            for line in result.failed:
                log.warning("wattwise: could not restore a setting left changed by a dead process: %s", line)

    # -- changing settings ----------------------------------------------------------------------------
    def set_power_limit(self, device: Device, watts: float) -> None:
        """Set a power limit (W), journalling the original first."""
        self._change(device, POWER_LIMIT, device.power_limit_w, lambda: device.set_power_limit_w(watts))

    def lock_sm_clocks(self, device: Device, min_mhz: int, max_mhz: int) -> None:
        """Lock SM clocks (MHz), journalling the original first."""
        self._change(device, SM_CLOCKS, device.locked_sm_clocks_mhz,
                     lambda: device.lock_sm_clocks_mhz(min_mhz, max_mhz))

    def reset_sm_clocks(self, device: Device) -> None:
        """Unlock SM clocks (the original stays journalled until restore)."""
        self._change(device, SM_CLOCKS, device.locked_sm_clocks_mhz, device.reset_sm_clocks)

    def _change(self, device: Device, setting: str, read: Callable[[], Any], apply: Callable[[], None]) -> None:
        first = self._record(device, setting, read)
        try:
            apply()
        except BaseException:
            # A refused first change (no permission, out of range) changed nothing: nothing to restore.
            if first:
                self._forget(device, setting)
            raise

    def _forget(self, device: Device, setting: str) -> None:
        dev_id = json.dumps(device.spec(), sort_keys=True)
        with self._lock:
            self._originals.pop((dev_id, setting), None)
            self._sync_journal()

    def _record(self, device: Device, setting: str, read: Callable[[], Any]) -> bool:
        """Journal the original value before the first change. True if this call recorded it."""
        spec = device.spec()
        dev_id = json.dumps(spec, sort_keys=True)
        with self._lock:
            if (dev_id, setting) in self._originals:
                return False
            original = read()
            if isinstance(original, tuple):
                original = list(original)
            self._originals[(dev_id, setting)] = original
            self._devices[dev_id] = device
            self._specs[dev_id] = spec
            self._write_journal()
            if not self._atexit:
                atexit.register(self.restore_all)
                self._atexit = True
            return True

    def _sync_journal(self) -> None:
        """The journal holds exactly the settings still to restore; with none left, there is no journal."""
        if self._originals:
            self._write_journal()
        else:
            with contextlib.suppress(FileNotFoundError):
                self.journal_path.unlink()

    def _write_journal(self) -> None:
        changes = [
            {"device": self._specs[dev_id], "setting": setting, "original": value}
            for (dev_id, setting), value in self._originals.items()
        ]
        _fsync_write(self.journal_path, {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "created": time.time(),
            "changes": changes,
        })

    @property
    def changed(self) -> bool:
        return bool(self._originals)

    # -- restoring ------------------------------------------------------------------------------------
    def restore_all(self) -> RestoreResult:
        """Put every changed setting back. Safe to call twice; never raises for a device error."""
        result = RestoreResult([], [])
        with self._lock:
            for (dev_id, setting), value in list(self._originals.items()):
                spec = self._specs[dev_id]
                try:
                    _apply(self._devices[dev_id], setting, value)
                    result.restored.append(_describe(spec, setting, value))
                    del self._originals[(dev_id, setting)]
                except (DeviceError, ValueError) as err:
                    result.failed.append(f"{_describe(spec, setting, value)}: {err}")
            self._sync_journal()
        for line in result.failed:
            log.error("wattwise: could not restore %s", line)
        return result

    def install_signal_handlers(self) -> None:
        """Restore on SIGTERM and SIGINT, then behave as the previous handler would.

        Only possible from the main thread; elsewhere this does nothing (atexit still restores).
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            if sig in self._previous_handlers:
                continue
            self._previous_handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, self._on_signal)

    def uninstall_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.restore_all()
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            # Default action of SIGTERM: die by the signal, so the parent sees the usual status.
            self.uninstall_signal_handlers()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def close(self) -> RestoreResult:
        result = self.restore_all()
        self.uninstall_signal_handlers()
        if self._atexit:
            atexit.unregister(self.restore_all)
            self._atexit = False
        return result

    def __enter__(self) -> SettingsGuard:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_stale_journals(directory: str | os.PathLike[str] | None = None, *,
                           include_live: bool = False) -> RestoreResult:
    """Restore the settings recorded by processes on this host that died without restoring them.

    `include_live` also restores the journals of processes still running (`wattwise restore --force`).
    A journal that cannot be fully restored is kept, so the next attempt can retry.
    """
    from wattwise.devices import open_spec

    folder = Path(directory) if directory is not None else journal_dir()
    result = RestoreResult([], [])
    if not folder.is_dir():
        return result
    host = socket.gethostname()
    for path in sorted(folder.glob("*.json")):
        try:
            journal = json.loads(path.read_text())
            pid, jhost, changes = int(journal["pid"]), journal["host"], list(journal["changes"])
            for change in changes:
                _ = (change["device"]["backend"], change["setting"], change["original"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            result.failed.append(f"{path}: unreadable journal ({err}); inspect or delete it")
            continue
        if jhost != host:
            continue
        if pid == os.getpid() or (_pid_alive(pid) and not include_live):
            continue
        remaining = []
        for change in changes:
            spec, setting, value = change["device"], change["setting"], change["original"]
            try:
                _apply(open_spec(spec), setting, value)
                result.restored.append(_describe(spec, setting, value))
            except (DeviceError, ValueError) as err:
                result.failed.append(f"{_describe(spec, setting, value)}: {err}")
                remaining.append(change)
        if remaining:
            journal["changes"] = remaining
            _fsync_write(path, journal)
        else:
            path.unlink()
    return result
