"""`SettingsGuard`: every change a training process makes to a GPU setting goes through here, and is undone.

Before the first change of a setting on a device, the guard takes that device's lock (`locks`: another
live holder makes the change fail with `DeviceBusyError`), then records the original value in memory and
in its journal (`journal`: one JSON file per guard, beside a lock file the guard holds while the journal
exists). A change it cannot journal first is not made (`JournalError`). It restores the originals on a
normal end (`restore_all`, the context manager, `atexit`), on an exception, on SIGTERM/SIGINT
(`install_signal_handlers`: restore first, then the framework's or the script's own handling goes on; see
`_on_signal`), and, after a SIGKILL or a power loss, at the next start (`recovery`, run by
every guard when it starts, before it reads any device, and by `wattwise restore`).

A GPU changed through the node agent (backend `agent`: its `Device.settings_lease` is set) is neither
locked nor journalled here: the agent holds it for this process (its lease) and journals the originals
itself, root-owned, before the first change. Restoring it means releasing the lease, and the agent puts
back what it recorded; if this process dies first, the agent restores the GPU the moment it ends. A
client-side journal would be redundant, and worse: replayed after a SIGKILL (by `wattwise restore` or the
next guard) it would set the "original" through the agent as a new change, taking a new lease on a GPU
that the agent had already restored, and perhaps handed to another job since.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from wattwise.devices.base import Device, DeviceError, DeviceLostError, DeviceSpec
from wattwise.errors import plugin_warning
from wattwise.settings.apply import (
    POWER_LIMIT,
    RESTORE_ERRORS,
    SM_CLOCKS,
    WORKLOAD_PROFILES,
    apply_setting,
    describe,
    read_setting,
)
from wattwise.settings.journal import JournalChange, JournalError, ensure_folder, journal_dir, save_changes
from wattwise.settings.locks import (
    DeviceBusyError,
    device_key,
    device_lock_path,
    lock_holder,
    release_lock,
    take_lock,
)
from wattwise.settings.recovery import RestoreResult, recover_stale_journals

__all__ = ["DeviceBusyError", "JournalError", "RestoreResult", "SettingsGuard", "SignalledError"]

#: Agent leases this process's guards use: lease key -> guards using it. A lease is the process's, not a
#: guard's: only the last guard that restores gives it back to the agent.
_LEASES: dict[str, int] = {}
_LEASES_LOCK = threading.Lock()

os.register_at_fork(after_in_child=_LEASES.clear)  # a forked child holds no lease


class SignalledError(DeviceError):
    """A setting change asked for after SIGTERM or SIGINT reached the process.

    Its settings were restored at the signal, and stay restored while the framework or the script winds
    down: a preemption must not leave a limit set.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(
            f"{signal.Signals(signum).name} was received: the GPU settings were restored and are "
            "not changed again in this process"
        )
        self.signum = signum


class SettingsGuard:
    """Records original GPU settings before changing them, and restores them on every exit path.

    Args:
        journal_directory: the folder of its journal and of the device locks (default `journal_dir()`).
        recover: restore first what dead processes left in that folder, before this process reads any
            setting (a dead run's leftover must not pass for an original).
    """

    def __init__(self, journal_directory: str | os.PathLike[str] | None = None, *, recover: bool = True):
        self.journal_dir = Path(journal_directory) if journal_directory is not None else journal_dir()
        self.journal_path = self.journal_dir / (f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self._journal_lock = self.journal_path.with_suffix(".lock")
        self._journal_locked = False
        self._lock = threading.RLock()
        self._devices: dict[str, Device] = {}
        self._originals: dict[tuple[str, str], Any] = {}
        self._specs: dict[str, DeviceSpec] = {}
        #: Devices a change found lost (`DeviceLostError`, raised to the caller, who reports it): restoring
        #: them fails for the same cause, so that failure is in `RestoreResult.failed` but not warned again.
        self._lost: set[str] = set()
        #: Device locks this guard holds, by device id (None: a device no other process can see).
        self._device_locks: dict[str, Path | None] = {}
        #: Agent leases this guard uses, by device id: no lock and no journal here, the agent has both.
        self._leases: dict[str, str] = {}
        self._previous_handlers: dict[int, Any] = {}
        #: The signal (SIGTERM, SIGINT) that reached the process while the handlers were installed, if one
        #: did: the settings were restored then, and no setting changes from then on (`SignalledError`).
        self.signalled: int | None = None
        #: Called when a signal takes its default action (the process ends by it), after restoring.
        self._at_default_exit: list[Callable[[], object]] = []
        self._atexit = False
        if recover:
            # Before this process reads any setting: a dead run's leftover must not pass for an original.
            result = recover_stale_journals(self.journal_dir)
            for line in result.restored:
                plugin_warning(f"wattwise: restored a setting left changed by a process that died: {line}")
            for line in result.failed:
                plugin_warning(f"wattwise: could not restore a setting left changed by a dead process: {line}")

    # -- changing settings ----------------------------------------------------------------------------
    def set_power_limit(self, device: Device, watts: float) -> None:
        """Set a power limit (W), journalling the original first."""
        self._change(device, POWER_LIMIT, lambda: device.set_power_limit_w(watts))

    def lock_sm_clocks(self, device: Device, min_mhz: int, max_mhz: int) -> None:
        """Lock SM clocks (MHz), journalling the original first."""
        self._change(device, SM_CLOCKS, lambda: device.lock_sm_clocks_mhz(min_mhz, max_mhz))

    def reset_sm_clocks(self, device: Device) -> None:
        """Unlock SM clocks (the original stays journalled until restore)."""
        self._change(device, SM_CLOCKS, device.reset_sm_clocks)

    def request_workload_power_profiles(self, device: Device, names: Sequence[str]) -> None:
        """Request exactly these NVML workload power profiles (empty: none), journalling the original first."""
        self._change(device, WORKLOAD_PROFILES, lambda: device.request_workload_power_profiles(list(names)))

    def _change(self, device: Device, setting: str, apply: Callable[[], None]) -> None:
        if self.signalled is not None:
            raise SignalledError(self.signalled)
        first = self._journal_original(device, setting)
        try:
            apply()
        except DeviceLostError:
            self._lost.add(json.dumps(device.spec(), sort_keys=True))
            if first:
                self._forget(device, setting)
            raise
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

    def _journal_original(self, device: Device, setting: str) -> bool:
        """Hold the device and journal the original value before the first change.

        Returns:
            True if this call recorded it (False: recorded before).

        Raises:
            DeviceBusyError: another process holds the device.
            JournalError: the original cannot be journalled: the change is not to be made.
        """
        spec = device.spec()
        dev_id = json.dumps(spec, sort_keys=True)
        with self._lock:
            if (dev_id, setting) in self._originals:
                return False
            self._hold(dev_id, device, spec)
            try:
                self._originals[(dev_id, setting)] = read_setting(device, setting)
                self._devices[dev_id] = device
                self._specs[dev_id] = spec
                self._write_journal()
            except BaseException:
                self._originals.pop((dev_id, setting), None)
                self._release_unused()
                raise
            if not self._atexit:
                atexit.register(self.restore_all)
                self._atexit = True
            return True

    def _hold(self, dev_id: str, device: Device, spec: DeviceSpec) -> None:
        """Take the device's lock (shared by the guards of this process) for as long as a setting is changed.

        For a device with a settings lease (the agent's), count this guard among the users of the process's
        lease instead.
        """
        if dev_id in self._device_locks or dev_id in self._leases:
            return
        lease = device.settings_lease
        if lease is not None:
            with _LEASES_LOCK:
                _LEASES[lease] = _LEASES.get(lease, 0) + 1
            self._leases[dev_id] = lease
            return
        ensure_folder(self.journal_dir)
        path = device_lock_path(self.journal_dir, spec)
        if path is not None:
            try:
                taken = take_lock(path)
            except OSError as err:
                raise JournalError(f"cannot create the lock {path} ({err.strerror}): the change is not made") from None
            if not taken:
                raise DeviceBusyError(device_key(spec), lock_holder(path))
        self._device_locks[dev_id] = path

    def _release_unused(self) -> None:
        """Let go of the devices with nothing left to restore."""
        in_use = {dev_id for dev_id, _ in self._originals}
        for dev_id in [d for d in self._device_locks if d not in in_use]:
            path = self._device_locks.pop(dev_id)
            if path is not None:
                release_lock(path)
        for dev_id in [d for d in self._leases if d not in in_use]:
            lease = self._leases.pop(dev_id)
            with _LEASES_LOCK:
                left = _LEASES.pop(lease, 1) - 1  # a forked child starts with none
                if left:
                    _LEASES[lease] = left

    def _sync_journal(self) -> None:
        """The journal holds exactly the settings still to restore; with none left, there is no journal."""
        try:
            self._write_journal()
        except JournalError as err:
            # The journal on disk still names every setting left (and some already restored: harmless).
            plugin_warning(f"wattwise: {err}")
        self._release_unused()

    def _write_journal(self) -> None:
        """Journal the settings to restore (not those of agent-backed GPUs: see the module docstring)."""
        changes: list[JournalChange] = [
            {"device": self._specs[dev_id], "setting": setting, "original": value}
            for (dev_id, setting), value in self._originals.items()
            if dev_id not in self._leases
        ]
        try:
            if changes and not self._journal_locked:
                self._journal_locked = take_lock(self._journal_lock)
            save_changes(self.journal_path, changes)
        except OSError as err:
            raise JournalError(
                f"cannot write the journal {self.journal_path} ({err.strerror or err}): the change is not made"
            ) from None
        if not changes and self._journal_locked:  # the journal is gone: so is the lock beside it
            self._journal_locked = False
            release_lock(self._journal_lock, unlink=True)

    @property
    def changed(self) -> bool:
        """Some setting this guard changed is still to restore."""
        return bool(self._originals)

    # -- restoring ------------------------------------------------------------------------------------
    def restore_all(self) -> RestoreResult:
        """Put every changed setting back. Safe to call twice; never raises for a device or disk error."""
        result = RestoreResult([], [])
        told: set[str] = set()
        with self._lock:
            for dev_id in [d for d in self._leases if self._last_user(d)]:
                self._release_lease(dev_id, result)
            for (dev_id, setting), value in list(self._originals.items()):
                spec = self._specs[dev_id]
                try:
                    apply_setting(self._devices[dev_id], setting, value)
                    result.restored.append(describe(spec, setting, value))
                    del self._originals[(dev_id, setting)]
                except RESTORE_ERRORS as err:
                    result.failed.append(f"{describe(spec, setting, value)}: {err}")
                    if isinstance(err, DeviceLostError) and dev_id in self._lost:
                        told.add(result.failed[-1])
            self._sync_journal()
        for line in result.failed:
            if line not in told:  # a device a change found lost: its caller reported that cause once
                plugin_warning(f"wattwise: could not restore {line}")
        return result

    def _last_user(self, dev_id: str) -> bool:
        """This guard is the last of the process to use the agent lease of `dev_id` (it has settings to restore)."""
        with _LEASES_LOCK:
            return _LEASES.get(self._leases[dev_id]) == 1 and any(d == dev_id for d, _ in self._originals)

    def _release_lease(self, dev_id: str, result: RestoreResult) -> None:
        """Give a device with a settings lease back (the agent's GPU).

        The agent restores the originals it recorded before this process's first change, and shows no
        holder from then on (not only when the process exits). When that fails, the caller sets the
        originals one by one instead, and reports what fails.
        """
        try:
            self._devices[dev_id].release()
        except RESTORE_ERRORS:
            return
        spec = self._specs[dev_id]
        settings = [(setting, value) for (d, setting), value in self._originals.items() if d == dev_id]
        for setting, value in settings:
            result.restored.append(f"{describe(spec, setting, value)} (released to the node agent)")
            del self._originals[(dev_id, setting)]

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
        """Put back the SIGTERM and SIGINT handlers found by `install_signal_handlers` (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers.clear()

    def at_default_exit(self, last_words: Callable[[], object]) -> None:
        """Have `last_words` called, after restoring, when SIGTERM ends the process by its default action.

        That is, when no handler of the framework or of the script takes the signal. A single process's run
        writes its summary there; an error in it is logged, and the process still ends by the signal.
        """
        self._at_default_exit.append(last_words)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Restore every setting, then let the signal's own handling go on.

        The handling is the handler this guard found (Lightning's, a script's own, Python's SIGINT
        handler), called as it would have been. A handler installed over this one that calls it in turn
        (Lightning composes the SIGTERM handler it finds with its own, and raises `SIGTERMException` later
        so that callbacks can checkpoint) handles the signal itself: nothing more here. Otherwise the
        default action: SIGINT raises KeyboardInterrupt, SIGTERM ends the process by the signal (143).
        """
        self.signalled = signum
        self.restore_all()
        previous = self._previous_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN or signal.getsignal(signum) != self._on_signal:
            return  # ignored, or called by a handler installed over this one: that handler handles it
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            # Default action of SIGTERM: die by the signal, so the parent sees the usual status.
            for last_words in self._at_default_exit:
                try:
                    last_words()
                except Exception as err:
                    plugin_warning(f"wattwise: at {signal.Signals(signum).name}: {type(err).__name__}: {err}")
            self.uninstall_signal_handlers()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def close(self) -> RestoreResult:
        """Restore every changed setting, and stop restoring at signals and at exit (the guard's end).

        Returns:
            What was restored and what could not be.
        """
        result = self.restore_all()
        self.uninstall_signal_handlers()
        if self._atexit:
            atexit.unregister(self.restore_all)
            self._atexit = False
        return result

    def __enter__(self) -> SettingsGuard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
