"""A simulated GPU's state file: its settings, kept on disk as a real GPU keeps them in hardware.

A process killed with SIGKILL leaves the changed power limit behind exactly as a real GPU would, so the
guard's recovery can be tested. The file holds `{"power_limit_w": W, "locked_sm_clocks_mhz": [lo, hi] or
null}`; it is never read or written through a symbolic link, read only when it can be trusted, and written
atomically, or overwritten in place on a full disk (a restore must not need a free block).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import TypedDict

from wattwise.bounds import POWER_LIMIT_W, check_integer
from wattwise.devices.simulated.models import ClockModel
from wattwise.errors import UsageError
from wattwise.safe_files import private_dir, write_text

#: A state file holds two settings; anything far larger is not one.
MAX_STATE_BYTES = 1 << 16


class SimulatedState(TypedDict):
    """A state file's object: the GPU's power limit (W) and its locked SM clock range (MHz), None when unlocked."""

    power_limit_w: float
    locked_sm_clocks_mhz: list[int] | None


def parse_state(state: dict[str, object], clock: ClockModel) -> tuple[float, tuple[int, int] | None]:
    """The settings in a state file's object: (power limit in W, locked SM clock range in MHz or None).

    Args:
        state: the file's JSON object as read (`write_state` writes a `SimulatedState`).
        clock: the GPU's clock model: a locked range must lie within its clocks, as `lock_sm_clocks_mhz`
            asks.

    Raises:
        UsageError: naming the setting that is missing, of the wrong type or outside its bound.
    """
    limit_w = POWER_LIMIT_W.check_number(state.get("power_limit_w"), "power_limit_w")
    locked = state.get("locked_sm_clocks_mhz")
    if locked is None:
        return limit_w, None
    if not isinstance(locked, list) or len(locked) != 2:
        raise UsageError(f"locked_sm_clocks_mhz must be null or [lowest, highest] MHz (got {locked!r})")
    low, high = (check_integer(mhz, "locked_sm_clocks_mhz", low=clock.min_mhz, high=clock.max_mhz) for mhz in locked)
    if low > high:
        raise UsageError(f"locked_sm_clocks_mhz [{low}, {high}] must name the lowest clock first")
    return limit_w, (low, high)


def signature(path: Path) -> tuple[int, int, int] | None:
    """What identifies the file's current content (None: no file)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def write_state(path: Path, limit_w: float, locked: tuple[int, int] | None) -> None:
    """Write the settings to the state file at `path`, in place when the disk is full.

    Raises:
        OSError: they cannot be written.
    """
    payload = SimulatedState(power_limit_w=limit_w, locked_sm_clocks_mhz=list(locked) if locked else None)
    private_dir(path.parent)
    # Readable by the node agent's users (their processes read its GPUs' state), writable by its owner.
    try:
        write_text(path, json.dumps(payload), mode=0o644)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.is_file():
            raise
        overwrite_in_place(path, json.dumps(payload))  # a restore on a full disk


def overwrite_in_place(path: Path, text: str) -> None:
    """Write `text` over the existing file `path`, without making a new file.

    Settings still change (and are restored) on a full disk, where the atomic write needs a block it cannot
    get. Text no longer than the file is padded with spaces (JSON allows them) and takes no new block; longer
    text is written after truncating the file, which frees its blocks first. Not atomic: only when the
    atomic write failed for lack of space.

    Raises:
        OSError: the file is missing, a symbolic link, or cannot be written even so.
    """
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if len(data) <= size:
            data += b" " * (size - len(data))
        else:
            os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
