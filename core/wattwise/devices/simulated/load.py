"""The load shared between processes when a node agent serves a simulated GPU.

A process driving emulated work adds the energy it draws above idle to a counter file beside the state
file (`add_load_j`, after a step, at most every `PUBLISH_LOAD_S`), and the agent counts that file in its
own energy (`read_load_j`), so its Prometheus energy counter follows the clients' load, not idle power only.
The file holds one small JSON object, `{"load_j": joules}`, changed under its flock.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from pathlib import Path

#: How often a process publishes the load it drives to a shared load file, at most (seconds).
PUBLISH_LOAD_S = 0.5
#: A load file holds one small JSON object: `{"load_j": joules}`.
MAX_LOAD_BYTES = 4096


def load_file_of(state_file: str | os.PathLike[str]) -> Path:
    """The shared load counter beside a simulated GPU's state file: `gpu<index>.load.json`."""
    path = Path(state_file)
    return path.with_name(f"{path.stem}.load.json")


def _parse_load_j(raw: bytes) -> float | None:
    """The joules a load file holds, or None when it holds no finite non-negative number."""
    try:
        value = json.loads(raw).get("load_j")
    except (ValueError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def add_load_j(path: Path, delta_j: float) -> bool:
    """Add `delta_j` to the load file at `path` under its flock; False when another process holds the lock.

    Raises:
        OSError: the file cannot be opened or written (no agent, or no permission).
    """
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        total = _parse_load_j(os.read(fd, MAX_LOAD_BYTES)) or 0.0
        data = json.dumps({"load_j": total + delta_j}).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return True


def read_load_j(path: Path) -> float | None:
    """The joules the load file at `path` holds; None when it cannot be read or holds no valid number."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            return _parse_load_j(os.read(fd, MAX_LOAD_BYTES))
        finally:
            os.close(fd)
    except OSError:
        return None
