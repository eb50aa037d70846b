"""Per-device locks: one holder per GPU among the wattwise processes of a host.

A lock is an flock on a small file in the journal folder; its holder writes its pid there (for messages
only). The kernel drops an flock when its process dies, so a lock that can be taken has no live holder,
whatever pid the file names. Within one process the guards share one lock per path (flock is per open
file, so a second open would refuse the first); a forked child (a data-loader worker) holds none.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from pathlib import Path

from wattwise.devices import settings_identity
from wattwise.devices.base import DeviceError, DeviceSpec
from wattwise.safe_files import lock_descriptor

#: Prefix of the per-device lock files in the journal folder.
DEVICE_LOCK_PREFIX = "device-"

#: Locks this process holds: path -> [fd, users].
_HELD: dict[str, list[int]] = {}
_HELD_LOCK = threading.Lock()


class DeviceBusyError(DeviceError):
    """Another live wattwise process holds this GPU (it changed a setting and has not restored it)."""

    def __init__(self, key: str, pid: int | None) -> None:
        who = f"wattwise process PID {pid}" if pid is not None else "another wattwise process"
        super().__init__(f"GPU {key} is held by {who}: this process leaves its settings alone and measures only")
        self.key, self.pid = key, pid


def _forget_locks_in_child() -> None:
    # A forked child is not the holder: its copies must not outlive the parent.
    for fd, _ in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


def try_flock(fd: int) -> bool:
    """Take the exclusive flock on `fd` without waiting; False when another open file holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_holder(path: Path) -> int | None:
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
    """Take (or share, within this process) the lock at `path`.

    Args:
        path: the lock file, created 0600 if missing, never through a symbolic link.

    Returns:
        True when this process holds it now; False when another process holds it.

    Raises:
        OSError: the lock file cannot be opened or created.
    """
    key = str(path)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return True
        fd = lock_descriptor(path)
        if not try_flock(fd):
            os.close(fd)
            return False
        with contextlib.suppress(OSError):  # the pid is for messages only; a full disk must not stop us
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        _HELD[key] = [fd, 1]
        return True


def release_lock(path: Path, *, unlink: bool = False) -> None:
    """Give back one use of the lock at `path`; the last use closes it (and removes the file if `unlink`)."""
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


def held_here(path: Path) -> bool:
    """This process holds the lock at `path`."""
    with _HELD_LOCK:
        return str(path) in _HELD


def probe(lock: Path) -> int | None:
    """The holder of a lock (pid, or 0 when unknown), or None when nobody holds it. Creates nothing."""
    if held_here(lock):
        return os.getpid()
    try:
        fd = lock_descriptor(lock, create=False)
    except OSError:
        return None
    try:
        if try_flock(fd):
            return None
    finally:
        os.close(fd)
    return lock_holder(lock) or 0


def device_key(spec: DeviceSpec) -> str:
    """How messages name the GPU of a device spec (`gpu<index>`)."""
    return f"gpu{spec.get('index')}"


def device_lock_path(folder: Path, spec: DeviceSpec) -> Path | None:
    """The lock file of a device: one per GPU, as its backend identifies it.

    The identity is `settings_identity`'s (NVML or amdsmi UUID, or a simulated GPU's state file); None when
    the device lives in this process only (a simulated GPU without a state file).
    """
    backend, ident = spec.get("backend"), settings_identity(spec)
    if ident is None:
        return None
    digest = hashlib.sha256(f"{backend}:{ident}".encode()).hexdigest()[:16]
    return folder / f"{DEVICE_LOCK_PREFIX}{backend}-{device_key(spec)}-{digest}.lock"
