"""Where wattwise keeps its state on disk, and how it creates files there and in output directories.

Every file wattwise writes is created so that a symlink planted at its name (or at a temporary name
beside it) is never followed: the content goes to a new file under a random name beside the target,
opened with O_CREAT|O_EXCL|O_NOFOLLOW, and `os.replace` then moves it over the target, replacing a link
there instead of writing through it. A lock file is opened with O_NOFOLLOW and never truncated. The
state directory is its owner's only (0700).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TextIO

from wattwise.errors import UsageError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def state_dir() -> Path:
    """`$WATTWISE_HOME`, else `$XDG_STATE_HOME/wattwise`, else `~/.local/state/wattwise`.

    Holds the guard's journal (GPU settings to restore after a crash), the simulated GPUs' settings and
    the default SQLite store. Only the path: a writer creates it with `private_dir`.
    """
    home = os.environ.get("WATTWISE_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "wattwise"


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create the directory `path` if missing, readable by its owner only (0700); returns it.

    Missing parents are created 0700 too; a directory that exists keeps its mode.
    """
    directory = Path(path)
    missing = []
    parent = directory
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            folder.mkdir(mode=0o700)
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def create_beside(target: Path, *, mode: int = 0o666) -> tuple[int, Path]:
    """A new empty file beside `target` under a random name, open for writing: (descriptor, path).

    Never opens an existing file or a link (O_CREAT|O_EXCL|O_NOFOLLOW); `mode` is filtered by the umask.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    while True:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue


def replace_binary(target: str | os.PathLike[str], write: Callable[[BinaryIO], object], *,
                   mode: int = 0o666) -> None:
    """`replace_file` for a binary file (a plot): temporary beside `target`, synced, moved over it."""
    path = Path(target)
    fd, tmp = create_beside(path, mode=mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def replace_file(target: str | os.PathLike[str], write: Callable[[TextIO], object], *, mode: int = 0o666) -> None:
    """Write a UTF-8 text file through a temporary beside `target`, synced, then move it over `target`.

    A symlink at `target` is replaced, never followed: the file it points to is left untouched.
    """
    path = Path(target)
    fd, tmp = create_beside(path, mode=mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(target: str | os.PathLike[str], text: str, *, mode: int = 0o666) -> None:
    """`replace_file` with one string: `target` holds `text` afterwards, or is as it was."""
    replace_file(target, lambda fh: fh.write(text), mode=mode)


def open_lock(path: str | os.PathLike[str]) -> int:
    """A descriptor on the lock file `path` (created 0600 if missing), for `fcntl.flock`.

    Opened without truncation and without following a symlink: a link at `path` is a `UsageError`.
    """
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise UsageError(f"{os.fspath(path)} is a symbolic link where wattwise keeps a lock file; wattwise "
                         "does not follow links there: remove the link and run again") from None
