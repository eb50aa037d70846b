"""The settings guard: every change to a GPU setting goes through here, and is undone on every exit.

Before the first change of a setting on a device, the guard takes that device's lock (one holder per GPU
among wattwise processes: another live holder makes the change fail with `DeviceBusyError`), then records
the original value in memory and in a small on-disk journal (one JSON file per guard, written atomically
and fsynced, beside a lock file the guard holds while the journal exists). A change it cannot journal
first is not made (`JournalError`). It restores the originals on a normal end (`restore_all`, the context
manager, `atexit`), on an exception, on SIGTERM/SIGINT (`install_signal_handlers`), and, after a SIGKILL
or a power loss, at the next start (`recover_stale_journals`, run by every guard when it starts, before
it reads any device, and by `wattwise restore`).

A journal is stale when its lock can be taken: the kernel drops an flock when its process dies, so a
recycled pid never makes a dead run's journal look alive. Journals are trusted only when they and their
folder belong to the user running wattwise and are not writable by others; a simulated GPU's state file
must be `gpu<index>.json` inside the user's state dir. A journal that fails any check is skipped with one
line naming the file and the problem, and kept.

A GPU changed through the node agent (backend `agent`, `wattwise.agent.client.AgentGPU`) is neither
locked nor journalled here: the agent holds it for this process (its lease) and journals the originals
itself, root-owned, before the first change. Restoring it means releasing the lease, and the agent puts
back what it recorded; if this process dies first, the agent restores the GPU the moment it ends. A
client-side journal would be redundant, and worse: replayed after a SIGKILL (by `wattwise restore` or the
next guard) it would set the "original" through the agent as a new change, taking a new lease on a GPU
that the agent had already restored, and perhaps handed to another job since.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import math
import os
import re
import signal
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from wattwise.agent.client import AgentGPU
from wattwise.devices.base import Device, DeviceError
from wattwise.paths import state_dir

log = logging.getLogger(__name__)

POWER_LIMIT = "power_limit_w"
SM_CLOCKS = "locked_sm_clocks_mhz"
#: A journal is a few hundred bytes; anything far larger is not one.
MAX_JOURNAL_BYTES = 1 << 20
#: The largest pid Linux hands out (`/proc/sys/kernel/pid_max` at most 2**22).
MAX_PID = 1 << 22
#: Prefix of the per-device lock files in the journal folder.
DEVICE_LOCK_PREFIX = "device-"


def journal_dir() -> Path:
    return state_dir() / "journal"


class DeviceBusyError(DeviceError):
    """Another live wattwise process holds this GPU (it changed a setting and has not restored it)."""

    def __init__(self, key: str, pid: int | None) -> None:
        who = f"wattwise process PID {pid}" if pid is not None else "another wattwise process"
        super().__init__(f"GPU {key} is held by {who}: this process leaves its settings alone and measures "
                         "only")
        self.key, self.pid = key, pid


class JournalError(DeviceError):
    """The journal cannot be written, or its folder cannot be trusted: the change is not made."""


@dataclass
class RestoreResult:
    """What a restore did: settings put back, the ones that could not be (with the reason), and journals
    left alone because a live wattwise process still holds them."""

    restored: list[str]
    failed: list[str]
    held: list[str] = field(default_factory=list)


# -- locks ----------------------------------------------------------------------------------------------
#: Locks this process holds: path -> [fd, users]. flock is per open file, so the guards of one process
#: share one lock per path instead of refusing each other.
_HELD: dict[str, list[int]] = {}
_HELD_LOCK = threading.Lock()
#: Agent leases this process's guards use: lease key -> guards using it. A lease is the process's, not a
#: guard's: only the last guard that restores gives it back to the agent.
_LEASES: dict[str, int] = {}


def _forget_locks_in_child() -> None:
    # A forked child (a data-loader worker) is not the holder: its copies must not outlive the parent.
    for fd, _ in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()
    _LEASES.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def _open_lock(path: Path, *, create: bool) -> int:
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    return os.open(path, flags, 0o600)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_holder(path: Path) -> int | None:
    """The pid a lock file names (written by its holder), if readable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    return int(text[0]) if text and text[0].isdigit() else None


def take_lock(path: Path) -> bool:
    """Take (or share, within this process) the lock at `path`; False when another process holds it."""
    key = str(path)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return True
        fd = _open_lock(path, create=True)
        if not _try_flock(fd):
            os.close(fd)
            return False
        with contextlib.suppress(OSError):  # the pid is for messages only; a full disk must not stop us
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        _HELD[key] = [fd, 1]
        return True


def release_lock(path: Path, *, unlink: bool = False) -> None:
    key = str(path)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _HELD[key]
        if unlink:  # while still holding it: a waiter then finds the journal gone, never a second holder
            with contextlib.suppress(OSError):
                path.unlink()
        os.close(held[0])


def _held_here(path: Path) -> bool:
    with _HELD_LOCK:
        return str(path) in _HELD


def _device_lock_path(folder: Path, spec: dict[str, Any]) -> Path | None:
    """The lock file of a device: one per GPU (NVML UUID, or simulated GPU's state file); None when the
    device lives in this process only (a simulated GPU without a state file)."""
    backend = spec.get("backend")
    if backend == "nvml":
        ident = str(spec.get("uuid") or spec.get("index"))
    elif backend == "simulated" and spec.get("state_file"):
        ident = os.path.realpath(str(spec["state_file"]))
    else:
        return None
    digest = hashlib.sha256(f"{backend}:{ident}".encode()).hexdigest()[:16]
    return folder / f"{DEVICE_LOCK_PREFIX}{backend}-{_key(spec)}-{digest}.lock"


def _key(spec: dict[str, Any]) -> str:
    return f"gpu{spec.get('index')}"


def _lease_key(device: Device) -> str | None:
    """The agent lease a change of `device` takes (socket and GPU index); None for a device changed here."""
    return f"{device.client.path}#{device.index}" if isinstance(device, AgentGPU) else None


# -- trust ----------------------------------------------------------------------------------------------
def _euid() -> int:
    return os.geteuid()


def _owner_problem(what: str, st: os.stat_result, *, sticky_ok: bool = False) -> str | None:
    """Why a file or folder cannot be trusted: owned by someone else, or writable by group or others."""
    uid = _euid()
    if st.st_uid != uid and not (sticky_ok and st.st_uid == 0):
        return f"{what} is owned by uid {st.st_uid}, not by you (uid {uid})"
    loose = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def folder_problem(folder: Path) -> str | None:
    """Why the journal folder cannot be trusted, or None. Its parent may be a sticky shared folder."""
    try:
        st = os.lstat(folder)
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder (a symbolic link or a file)"
    problem = _owner_problem("the folder", st)
    if problem:
        return problem
    with contextlib.suppress(OSError):
        return _owner_problem("its parent folder", os.stat(folder.parent), sticky_ok=True)
    return None


def _ensure_folder(folder: Path) -> None:
    """Create the journal folder (0700) or check the existing one; JournalError when it is not trusted."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    except OSError as err:
        raise JournalError(f"cannot create the journal folder {folder} ({err.strerror}): no GPU setting is "
                           "changed") from None
    problem = folder_problem(folder)
    if problem:
        raise JournalError(f"journal folder {folder}: {problem}; refusing to record GPU settings there "
                           f"(chmod 700 it, as its owner)")


class JournalProblem(Exception):
    """A journal that cannot be trusted or understood; the message says why."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_state_file(spec: dict[str, Any]) -> None:
    """A simulated GPU's state file must be `gpu<index>.json` in a folder of yours inside your state dir."""
    raw = spec.get("state_file")
    if not isinstance(raw, str) or not os.path.isabs(raw):
        raise JournalProblem(f"simulated GPU state_file {raw!r} is not an absolute path")
    path = Path(os.path.normpath(raw))
    if path.name != f"gpu{spec['index']}.json":
        raise JournalProblem(f"simulated GPU state_file {raw} is not named gpu{spec['index']}.json")
    root = Path(os.path.realpath(state_dir()))
    if os.path.realpath(path.parent) != str(path.parent) or root not in path.parents:
        raise JournalProblem(f"simulated GPU state_file {raw} is not inside your state dir {root} (or its "
                             "path has a symbolic link)")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise JournalProblem(f"simulated GPU state_file {raw}: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise JournalProblem(f"simulated GPU state_file {raw} is not a regular file")
    problem = _owner_problem("its state_file", st)
    if problem:
        raise JournalProblem(f"simulated GPU {problem}")


def _check_change(change: Any) -> None:
    if not isinstance(change, dict):
        raise JournalProblem(f"a change is not an object: {change!r}")
    spec, setting, value = change.get("device"), change.get("setting"), change.get("original", ...)
    if not isinstance(spec, dict) or spec.get("backend") not in ("nvml", "simulated"):
        raise JournalProblem(f"a change names no GPU of backend nvml or simulated: {spec!r}")
    if not isinstance(spec.get("index"), int) or isinstance(spec.get("index"), bool) or spec["index"] < 0:
        raise JournalProblem(f"a change names no GPU index: {spec!r}")
    if setting == POWER_LIMIT:
        if not (_number(value) and value > 0):
            raise JournalProblem(f"original power limit {value!r} is not a positive number of watts")
    elif setting == SM_CLOCKS:
        ok = value is None or (isinstance(value, list) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 < v < 100_000 for v in value)
            and value[0] <= value[1])
        if not ok:
            raise JournalProblem(f"original locked clocks {value!r} are neither null nor [min, max] MHz")
    else:
        raise JournalProblem(f"unknown setting {setting!r}" if value is not ... else "a change has no original")
    if spec["backend"] == "simulated":
        rng = spec.get("limit_range_w")
        if rng is not None and not (isinstance(rng, list) and len(rng) == 2 and all(_number(v) for v in rng)
                                    and 0 < rng[0] < rng[1]):
            raise JournalProblem(f"simulated GPU limit_range_w {rng!r} is not [min, max] watts")
        _check_state_file(spec)


@dataclass
class Journal:
    """A journal read from disk and checked."""

    path: Path
    pid: int
    host: str
    changes: list[dict[str, Any]]
    raw: dict[str, Any]


def read_journal(path: Path) -> Journal:
    """Read and check one journal; JournalProblem says what is wrong (FileNotFoundError: gone meanwhile)."""
    fd = -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise JournalProblem("not a regular file")
        problem = _owner_problem("the journal", st)
        if problem:
            raise JournalProblem(problem)
        data = os.read(fd, MAX_JOURNAL_BYTES + 1)
    except FileNotFoundError:
        raise
    except OSError as err:
        reason = "a symbolic link" if err.errno == errno.ELOOP else err.strerror
        raise JournalProblem(f"cannot read it ({reason})") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_JOURNAL_BYTES:
        raise JournalProblem(f"larger than {MAX_JOURNAL_BYTES} bytes")
    try:
        journal = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise JournalProblem("not text (binary content)") from None
    except ValueError as err:
        raise JournalProblem(f"not JSON ({err})") from None
    if not isinstance(journal, dict):
        raise JournalProblem("not a JSON object")
    pid, host, changes = journal.get("pid"), journal.get("host"), journal.get("changes")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        raise JournalProblem(f"pid {pid!r} is not a process id")
    if not isinstance(host, str):
        raise JournalProblem(f"host {host!r} is not a host name")
    if not isinstance(changes, list):
        raise JournalProblem("no list of changes")
    for change in changes:
        _check_change(change)
    return Journal(path, pid, host, changes, journal)


# -- writing --------------------------------------------------------------------------------------------
def _fsync_write(path: Path, payload: dict[str, Any]) -> None:
    """Write a journal atomically (temporary file, fsync, rename). OSError on failure, nothing half-written."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with open(fd, "w") as fh:
            json.dump(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
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


#: Errors a restore reports instead of raising (a device that refuses, a state file that cannot be written).
_RESTORE_ERRORS = (DeviceError, ValueError, TypeError, OSError)


class SettingsGuard:
    """Records original GPU settings before changing them, and restores them on every exit path."""

    def __init__(self, journal_directory: str | os.PathLike[str] | None = None, *, recover: bool = True):
        self.journal_dir = Path(journal_directory) if journal_directory is not None else journal_dir()
        self.journal_path = self.journal_dir / (
            f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json")
        self._journal_lock = self.journal_path.with_suffix(".lock")
        self._journal_locked = False
        self._lock = threading.RLock()
        self._devices: dict[str, Device] = {}
        self._originals: dict[tuple[str, str], Any] = {}
        self._specs: dict[str, dict[str, Any]] = {}
        #: Device locks this guard holds, by device id (None: a device no other process can see).
        self._device_locks: dict[str, Path | None] = {}
        #: Agent leases this guard uses, by device id: no lock and no journal here, the agent has both.
        self._leases: dict[str, str] = {}
        self._previous_handlers: dict[int, Any] = {}
        self._atexit = False
        if recover:
            # Before this process reads any setting: a dead run's leftover must not pass for an original.
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
        """Hold the device and journal the original value before the first change. True if this call
        recorded it. DeviceBusyError: another process holds the device; JournalError: no journal, no change."""
        spec = device.spec()
        dev_id = json.dumps(spec, sort_keys=True)
        with self._lock:
            if (dev_id, setting) in self._originals:
                return False
            self._hold(dev_id, device, spec)
            try:
                original = read()
                if isinstance(original, tuple):
                    original = list(original)
                self._originals[(dev_id, setting)] = original
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

    def _hold(self, dev_id: str, device: Device, spec: dict[str, Any]) -> None:
        """Take the device's lock (shared by the guards of this process) for as long as a setting is changed;
        for an agent-backed GPU, count this guard among the users of the process's lease."""
        if dev_id in self._device_locks or dev_id in self._leases:
            return
        lease = _lease_key(device)
        if lease is not None:
            with _HELD_LOCK:
                _LEASES[lease] = _LEASES.get(lease, 0) + 1
            self._leases[dev_id] = lease
            return
        _ensure_folder(self.journal_dir)
        path = _device_lock_path(self.journal_dir, spec)
        if path is not None:
            try:
                taken = take_lock(path)
            except OSError as err:
                raise JournalError(f"cannot create the lock {path} ({err.strerror}): the change is not "
                                   "made") from None
            if not taken:
                raise DeviceBusyError(_key(spec), _lock_holder(path))
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
            with _HELD_LOCK:
                left = _LEASES.pop(lease, 1) - 1  # a forked child starts with none
                if left:
                    _LEASES[lease] = left

    def _sync_journal(self) -> None:
        """The journal holds exactly the settings still to restore; with none left, there is no journal."""
        try:
            self._write_journal()
        except JournalError as err:
            # The journal on disk still names every setting left (and some already restored: harmless).
            log.warning("wattwise: %s", err)
        self._release_unused()

    def _write_journal(self) -> None:
        """Journal the settings to restore (not those of agent-backed GPUs: see the module docstring)."""
        changes = [
            {"device": self._specs[dev_id], "setting": setting, "original": value}
            for (dev_id, setting), value in self._originals.items() if dev_id not in self._leases
        ]
        if not changes:
            with contextlib.suppress(OSError):
                self.journal_path.unlink()
            if self._journal_locked:
                self._journal_locked = False
                release_lock(self._journal_lock, unlink=True)
            return
        try:
            if not self._journal_locked:
                self._journal_locked = take_lock(self._journal_lock)
            _fsync_write(self.journal_path, {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "created": time.time(),
                "changes": changes,
            })
        except OSError as err:
            raise JournalError(f"cannot write the journal {self.journal_path} ({err.strerror or err}): the "
                               "change is not made") from None

    @property
    def changed(self) -> bool:
        return bool(self._originals)

    # -- restoring ------------------------------------------------------------------------------------
    def restore_all(self) -> RestoreResult:
        """Put every changed setting back. Safe to call twice; never raises for a device or disk error."""
        result = RestoreResult([], [])
        with self._lock:
            for dev_id in [d for d in self._leases if self._last_user(d)]:
                self._release_lease(dev_id, result)
            for (dev_id, setting), value in list(self._originals.items()):
                spec = self._specs[dev_id]
                try:
                    _apply(self._devices[dev_id], setting, value)
                    result.restored.append(_describe(spec, setting, value))
                    del self._originals[(dev_id, setting)]
                except _RESTORE_ERRORS as err:
                    result.failed.append(f"{_describe(spec, setting, value)}: {err}")
            self._sync_journal()
        for line in result.failed:
            log.error("wattwise: could not restore %s", line)
        return result

    def _last_user(self, dev_id: str) -> bool:
        """This guard is the last of the process to use the agent lease of `dev_id` (it has settings to restore)."""
        with _HELD_LOCK:
            return _LEASES.get(self._leases[dev_id]) == 1 and any(d == dev_id for d, _ in self._originals)

    def _release_lease(self, dev_id: str, result: RestoreResult) -> None:
        """Give an agent-backed GPU back: the agent restores the originals it recorded before this process's
        first change, and shows no holder from then on (not only when the process exits). When that fails,
        the caller sets the originals one by one instead, and reports what fails."""
        device = self._devices[dev_id]
        assert isinstance(device, AgentGPU)
        try:
            device.release()
        except _RESTORE_ERRORS:
            return
        spec = self._specs[dev_id]
        settings = [(setting, value) for (d, setting), value in self._originals.items() if d == dev_id]
        for setting, value in settings:
            result.restored.append(f"{_describe(spec, setting, value)} (released to the node agent)")
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


# -- journals left behind --------------------------------------------------------------------------------
@dataclass
class JournalStatus:
    """One journal in the folder: its owner is alive (`holder`) or gone, or it cannot be used (`problem`)."""

    path: Path
    journal: Journal | None
    #: The live process holding it (its pid when known, else 0); None when the journal is stale.
    holder: int | None
    problem: str | None = None


_JOURNAL_NAME = re.compile(r"^[^/\x00]+\.json$")


def journal_statuses(directory: str | os.PathLike[str] | None = None) -> tuple[list[JournalStatus], str | None]:
    """Every journal of this host in the folder, read-only (takes no lock, changes nothing), and the reason
    the folder itself cannot be trusted, if it cannot. For `wattwise devices`."""
    folder = Path(directory) if directory is not None else journal_dir()
    if not folder.exists():
        return [], None
    problem = folder_problem(folder)
    if problem:
        return [], problem
    out = []
    for path in sorted(p for p in folder.glob("*.json") if _JOURNAL_NAME.match(p.name)):
        lock = path.with_suffix(".lock")
        holder = _probe(lock)
        try:
            journal = read_journal(path)
        except FileNotFoundError:
            continue
        except JournalProblem as err:
            out.append(JournalStatus(path, None, holder, str(err)))
            continue
        if journal.host == socket.gethostname():
            out.append(JournalStatus(path, journal, holder))
    return out, None


def _probe(lock: Path) -> int | None:
    """The holder of a lock (pid, or 0 when unknown), or None when nobody holds it. Creates nothing."""
    if _held_here(lock):
        return os.getpid()
    try:
        fd = _open_lock(lock, create=False)
    except OSError:
        return None
    try:
        if _try_flock(fd):
            return None
    finally:
        os.close(fd)
    return _lock_holder(lock) or 0


def recover_stale_journals(directory: str | os.PathLike[str] | None = None, *,
                           include_live: bool = False) -> RestoreResult:
    """Restore the settings recorded by processes on this host that died without restoring them.

    A journal is stale when its lock can be taken, whatever its pid. A journal still held by a live
    wattwise process is never touched: it is listed in `held`, or, with `include_live`
    (`wattwise restore --force`), reported as a failure naming the process. A journal that cannot be
    trusted or read is reported, skipped and kept; one that cannot be fully restored is kept with what
    failed, so the next attempt can retry.
    """
    folder = Path(directory) if directory is not None else journal_dir()
    result = RestoreResult([], [])
    if not folder.exists():
        return result
    problem = folder_problem(folder)
    if problem:
        result.failed.append(f"journal folder {folder}: {problem}; not restoring anything from it")
        return result
    for path in sorted(p for p in folder.glob("*.json") if _JOURNAL_NAME.match(p.name)):
        lock = path.with_suffix(".lock")
        if _held_here(lock):
            continue  # this process's own guard
        try:
            fd = _open_lock(lock, create=True)
        except OSError as err:
            if lock.exists():
                result.failed.append(f"{path}: cannot open its lock {lock} ({err.strerror}); skipped")
                continue
            fd = -1  # no lock file and none can be made (a full disk): nobody holds it
        try:
            if fd >= 0 and not _try_flock(fd):
                _live(result, path, lock, include_live)
                continue
            _recover_one(path, result)
        finally:
            if fd >= 0:
                os.close(fd)
    return result


def _live(result: RestoreResult, path: Path, lock: Path, include_live: bool) -> None:
    pid = _lock_holder(lock)
    who = f"wattwise process PID {pid}" if pid else "a live wattwise process"
    if include_live:
        result.failed.append(f"{path}: held by {who}, still running: not restored (--force never takes a GPU "
                             f"from a running wattwise process; stop it{f' (kill {pid})' if pid else ''} and it "
                             "restores its settings itself)")
    else:
        result.held.append(f"{path}: held by {who}, still running (it restores its settings when it ends)")


def _recover_one(path: Path, result: RestoreResult) -> None:
    """Restore one stale journal (its lock held by the caller); delete it once everything is back."""
    from wattwise.devices import open_spec

    try:
        journal = read_journal(path)
    except FileNotFoundError:
        return  # its owner finished meanwhile
    except JournalProblem as err:
        result.failed.append(f"{path}: {err}; skipped (the file is kept: inspect or delete it)")
        return
    if journal.host != socket.gethostname():
        return
    remaining = []
    for change in journal.changes:
        spec, setting, value = change["device"], change["setting"], change["original"]
        state_file = spec.get("state_file") if spec["backend"] == "simulated" else None
        if state_file is not None and not Path(state_file).parent.is_dir():
            result.restored.append(f"{_describe(spec, setting, value)} (nothing to do: the simulated GPU's "
                                   "state folder is gone)")
            continue
        try:
            _apply(open_spec(spec), setting, value)
            result.restored.append(_describe(spec, setting, value))
        except _RESTORE_ERRORS as err:
            result.failed.append(f"{_describe(spec, setting, value)}: {err}")
            remaining.append(change)
    try:
        if remaining:
            journal.raw["changes"] = remaining
            _fsync_write(path, journal.raw)
        else:
            path.unlink()
            with contextlib.suppress(OSError):
                path.with_suffix(".lock").unlink()
    except OSError as err:
        result.failed.append(f"{path}: cannot update it ({err.strerror}); the next restore retries it")


def _setting_words(setting: str, value: Any) -> str:
    if setting == POWER_LIMIT:
        return f"power limit {value:g} W" if _number(value) else f"power limit {value}"
    if value is None:
        return "SM clocks unlocked"
    return f"SM clocks locked at {value[0]}-{value[1]} MHz"


def _current(spec: dict[str, Any], setting: str) -> Any:
    """The setting now on the device (opened from a checked journal's spec); raises when unreadable."""
    from wattwise.devices import open_spec

    device = open_spec(spec)
    value = device.power_limit_w() if setting == POWER_LIMIT else device.locked_sm_clocks_mhz()
    return list(value) if isinstance(value, tuple) else value


def leftover_lines(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """What `wattwise devices` says about the journal: settings a dead process left changed (to restore
    with `wattwise restore`), settings a running wattwise process holds, and journals it cannot use.
    Read-only: restores nothing, takes no lock."""
    statuses, problem = journal_statuses(directory)
    if problem:
        folder = Path(directory) if directory is not None else journal_dir()
        return [f"journal folder {folder}: {problem}; `wattwise restore` will not use it"]
    lines = []
    for status in statuses:
        if status.journal is None:
            lines.append(f"unusable journal {status.path}: {status.problem}; `wattwise restore` skips it")
            continue
        for change in status.journal.changes:
            spec, setting, original = change["device"], change["setting"], change["original"]
            where = f"{spec['backend']} {_key(spec)}"
            if status.holder is not None:
                pid = status.holder or status.journal.pid
                lines.append(f"in use: {where} changed by running wattwise process PID {pid}, original "
                             f"{_setting_words(setting, original)}")
                continue
            try:
                now = _setting_words(setting, _current(spec, setting))
            except Exception:  # a device that cannot be opened still has a leftover to report
                now = f"{_setting_words(setting, original).split(' ')[0]} setting (current value unreadable)"
            lines.append(f"leftover: {where} {now} from dead process PID {status.journal.pid}, original "
                         f"{_setting_words(setting, original)}; run `wattwise restore`")
    return lines
