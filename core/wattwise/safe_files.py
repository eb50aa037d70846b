"""Where wattwise keeps its state on disk, and how it creates files there and in output directories.

Every file wattwise writes is created so that a symlink planted at its name (or at a temporary name
beside it) is never followed: the content goes to a new file under a random name beside the target,
opened with O_CREAT|O_EXCL|O_NOFOLLOW, and `os.replace` then moves it over the target, replacing a link
there instead of writing through it. A lock file is opened with O_NOFOLLOW and never truncated. The
state directory is its owner's only (0700).

A file wattwise reads back from there (a settings journal, a spooled result, a simulated GPU's state, the
remembered limits of 0.1.0) is read only when it can be trusted (`read_trusted`, `trust_problem`): a
regular file of the user running wattwise, never followed through a link, not writable by others, with
no other hard link; one of the user's own that fails is set aside (`set_aside_if_mine`). These checks,
and the one on the folders such files live in (`owner_problem`, `private_folder_problem`), are made here only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from wattwise.errors import Part, UsageError, WattwiseError

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


def replace_binary(
    target: str | os.PathLike[str],
    write: Callable[[BinaryIO], object],
    *,
    mode: int = 0o666,
    user_named: bool = False,
) -> None:
    """`replace_file` for a binary file (a plot)."""
    _replace(target, write, mode=mode, text=False, user_named=user_named)


def replace_file(
    target: str | os.PathLike[str],
    write: Callable[[TextIO], object],
    *,
    mode: int = 0o666,
    sync_folder: bool = False,
    user_named: bool = False,
) -> None:
    """Write a UTF-8 text file through a temporary beside `target`, synced, then move it over `target`.

    Only a regular file is ever written: `target` is created, or a regular file there replaced whole
    (atomically); a device node, FIFO, socket or folder there is refused (`NotARegularFile`), so that even
    root's `--html /dev/full` leaves the device as it is. A symlink at `target` is replaced, never followed
    (the file it points to is left untouched), unless `user_named`: a path the user gave (`--html`,
    `--out`) that is a link is refused, saying so, rather than replaced behind the user's back.

    Args:
        target: the file to write.
        write: writes the content to the open temporary file.
        mode: the new file's mode (filtered by the umask).
        sync_folder: also sync the folder after the move, so that the new file survives a power loss
            (the settings journal: its content must be on disk before the change it records).
        user_named: `target` is a path the user named (refuse a link there).

    Raises:
        NotARegularFile: something other than a regular file is at `target` (nothing is written).
        OSError: it cannot be written (a full disk, no permission); `target` is then as it was.
    """
    _replace(target, write, mode=mode, text=True, sync_folder=sync_folder, user_named=user_named)


class NotARegularFile(UsageError):
    """Something other than a regular file is where wattwise would write one; the message names what and the fix."""


def _kind(st: os.stat_result) -> str | None:
    """What a non-regular file is, as a message names it; None for a regular file."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    )
    if stat.S_ISREG(st.st_mode):
        return None
    return next((name for test, name in kinds if test(st.st_mode)), "not a regular file")


def check_writable_target(target: str | os.PathLike[str], *, user_named: bool = True, flag: str | None = None) -> None:
    """Refuse a `target` wattwise would replace that is not a regular file (missing is fine).

    A symlink is refused only when `user_named` (elsewhere it is replaced, never followed). `flag`: the
    option that named `target` (`--html`), for the message.

    Raises:
        NotARegularFile: naming the path, what is there, and the fix.
    """
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    kind = _kind(st)
    if kind is None or (kind == "a symbolic link" and not user_named):
        return
    named = f"{flag} {os.fspath(target)}" if flag else os.fspath(target)
    raise NotARegularFile(
        f"{named} is {kind}; wattwise writes only regular files, so nothing was written there: "
        "give the path of a new or a regular file"
    )


def _replace(
    target: str | os.PathLike[str],
    write: Callable[[Any], object],
    *,
    mode: int,
    text: bool,
    sync_folder: bool = False,
    user_named: bool = False,
) -> None:
    path = Path(target)
    check_writable_target(path, user_named=user_named)
    fd, tmp = create_beside(path, mode=mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        check_writable_target(path, user_named=user_named)  # again: something may have been put there meanwhile
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_folder:
        with contextlib.suppress(OSError):  # the file is in place; a folder that cannot be synced stays as is
            folder_fd = os.open(path.parent, os.O_RDONLY | _CLOEXEC)
            try:
                os.fsync(folder_fd)
            finally:
                os.close(folder_fd)


def finite_or_null(value: Any) -> Any:
    """`value` with every non-finite float (nan, inf) replaced by None, in nested dicts, lists and tuples.

    JSON has no such numbers.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return value


def json_text(value: Any, *, indent: int | None = 2, separators: tuple[str, str] | None = None) -> str:
    """Valid JSON for any output (a figure that is not finite becomes null, never `Infinity` or `NaN`)."""
    try:  # most outputs hold no such figure: no copy of them then
        return json.dumps(value, indent=indent, separators=separators, allow_nan=False)
    except ValueError:
        return json.dumps(finite_or_null(value), indent=indent, separators=separators, allow_nan=False)


def read_text(
    path: str | os.PathLike[str],
    *,
    what: str | tuple[Part, ...],
    expected: str,
    fix: str,
    error: type[UsageError] = UsageError,
) -> str:
    """The UTF-8 text of a file the user gave (a BOM dropped).

    An unreadable, binary or non-UTF-8 file is one `error` line naming `what` (text, or text and the setting
    that gave the file), what was `expected` and the `fix`.
    """
    named = (what,) if isinstance(what, str) else what
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as err:
        raise error(*named, f": cannot be read ({err.strerror or err}); check its permissions") from None
    if b"\x00" in data:
        raise error(*named, f": holds binary data (a NUL byte at offset {data.index(0)}), not {expected}; {fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise error(*named, f": not UTF-8 text (byte {err.start}); {fix}") from None


def write_text(
    target: str | os.PathLike[str],
    text: str,
    *,
    mode: int = 0o666,
    sync_folder: bool = False,
    user_named: bool = False,
) -> None:
    """`replace_file` with one string: `target` holds `text` afterwards, or is as it was."""
    replace_file(target, lambda fh: fh.write(text), mode=mode, sync_folder=sync_folder, user_named=user_named)


def output_dir(path: str | os.PathLike[str], *, flag: str) -> Path:
    """A folder the user named for wattwise's output (`--out`), created when missing; never followed as a link.

    Raises:
        NotARegularFile: `path` is a symbolic link, or something other than a folder.
    """
    folder = Path(path)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    if not stat.S_ISDIR(st.st_mode):
        raise NotARegularFile(
            f"{flag} {os.fspath(folder)} is {_kind(st) or 'a file'}, not a folder; wattwise writes its files only "
            "into a real folder: give a folder's own path (or a new one)"
        )
    return folder


def lock_descriptor(path: str | os.PathLike[str], *, create: bool = True) -> int:
    """A descriptor on the lock file `path`, for `fcntl.flock`: the one way wattwise opens a lock file.

    Opened read-write, without truncation and without following a symbolic link.

    Args:
        path: the lock file.
        create: create it (0600, filtered by the umask) if missing.

    Raises:
        OSError: it cannot be opened (ELOOP: it is a symbolic link; ENOENT: missing and not `create`).
    """
    flags = os.O_RDWR | _NOFOLLOW | _CLOEXEC | (os.O_CREAT if create else 0)
    return os.open(path, flags, 0o600)


def open_lock(path: str | os.PathLike[str]) -> int:
    """A descriptor on the lock file `path` (created 0600 if missing), for `fcntl.flock`.

    Opened without truncation and without following a symlink: a link at `path` is a `UsageError`.
    """
    try:
        return lock_descriptor(path)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise UsageError(
            f"{os.fspath(path)} is a symbolic link where wattwise keeps a lock file; wattwise "
            "does not follow links there: remove the link and run again"
        ) from None


class UntrustedFile(WattwiseError):
    """A file wattwise reads back that it cannot trust; the message says why (`trust_problem`).

    Args:
        reason: why, as a phrase after the file's name ("is a symbolic link").
        owner_uid: the file's owner (a link's own owner), None when unknown: a file of another user is
            theirs to keep, so a reader leaves it where it is; one of the reader's own is set aside.
    """

    def __init__(self, reason: str, *, owner_uid: int | None) -> None:
        super().__init__(reason)
        self.owner_uid = owner_uid

    @property
    def mine(self) -> bool:
        """Whether the file belongs to the user running wattwise (so it may be set aside)."""
        return self.owner_uid == os.geteuid()


def owner_problem(
    what: str | None, st: os.stat_result, *, root_ok: bool = False, sticky_ok: bool = False
) -> str | None:
    """Why a file or folder wattwise relies on is not the reader's own to trust, as a phrase; None when it is.

    The one check of who may have written it: it belongs to the user running wattwise (or to root, with
    `root_ok` or `sticky_ok`), and neither group nor others may write it. In a shared `WATTWISE_HOME`
    (or a shared /tmp) any user can plant a file where wattwise looks; only these are the user's own.

    Args:
        what: how the phrase names it ("the journal", "the folder"); None for a phrase that follows the
            path ("... belongs to uid 1001, not to you (uid 1000)").
        st: its `os.lstat`, `os.stat` or `os.fstat`.
        root_ok: a root-owned one is trusted too (the node agent's simulated GPU state, read by its users).
        sticky_ok: a folder like /tmp is fine too: root-owned, or writable by others with the sticky bit.
    """
    uid = os.geteuid()
    if st.st_uid != uid and not ((root_ok or sticky_ok) and st.st_uid == 0):
        if what is None:
            return f"belongs to uid {st.st_uid}, not to you (uid {uid})"
        return f"{what} is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        return f"{what + ' ' if what else ''}is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def private_folder_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why a folder wattwise keeps files in (a journal's, a socket's) cannot be trusted, as a phrase; None if it can.

    It must be a folder itself (not a symbolic link to one) and pass `owner_problem`.
    """
    try:
        st = os.lstat(folder)
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder (a symbolic link or a file)"
    return owner_problem("the folder", st)


def trust_problem(st: os.stat_result, *, root_ok: bool = False, what: str | None = None, links: int = 1) -> str | None:
    """Why a file with the status `st` cannot be trusted, as a phrase; None when it can.

    Trusted: a regular file that passes `owner_problem`, with no other hard link (a link to someone
    else's file has its owner). Every file wattwise reads back is held to this: a settings journal, a
    spooled result, a simulated GPU's state, 0.1.0's remembered limits.

    Args:
        st: the file's `os.lstat` or `os.fstat`.
        root_ok: a root-owned file is trusted too (see `owner_problem`).
        what: how an owner's phrase names the file (see `owner_problem`).
        links: how many hard links the file may have (a run's summary has two: its own folder keeps one).
    """
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link (wattwise never follows one there)"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    problem = owner_problem(what, st, root_ok=root_ok)
    if problem:
        return problem
    if st.st_nlink > links:
        return f"has {st.st_nlink - 1} other hard link(s)"
    return None


def file_owner(path: str | os.PathLike[str]) -> int | None:
    """The uid that owns `path` itself (a link's own owner); None when it is gone or cannot be read."""
    try:
        return os.lstat(path).st_uid
    except OSError:
        return None


def read_trusted(
    path: str | os.PathLike[str], *, max_bytes: int, root_ok: bool = False, what: str | None = None, links: int = 1
) -> bytes:
    """The bytes of a file wattwise wrote earlier and now reads back, read only when `trust_problem` has none.

    Opened without following a link (O_NOFOLLOW) and without blocking on a FIFO; the checks are on the open
    file, so a file swapped in between is never read.

    Args:
        path: the file.
        max_bytes: the most it may hold; a larger file is not one wattwise wrote.
        root_ok: a root-owned file is trusted too (see `trust_problem`).
        what: how an owner's phrase names the file (see `owner_problem`).
        links: how many hard links it may have (see `trust_problem`).

    Raises:
        FileNotFoundError: there is no file at `path`.
        UntrustedFile: it cannot be trusted or read; the message says why, `owner_uid` whose it is.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as err:
        owner = file_owner(path)
        if err.errno == errno.ELOOP:
            raise UntrustedFile("is a symbolic link (wattwise never follows one there)", owner_uid=owner) from None
        raise UntrustedFile(f"cannot be read ({err.strerror or err})", owner_uid=owner) from None
    try:
        st = os.fstat(fd)
        problem = trust_problem(st, root_ok=root_ok, what=what, links=links)
        if problem:
            raise UntrustedFile(problem, owner_uid=st.st_uid)
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise UntrustedFile(f"cannot be read ({err.strerror or err})", owner_uid=None) from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise UntrustedFile(f"is larger than {max_bytes} bytes, more than wattwise writes there", owner_uid=st.st_uid)
    return b"".join(chunks)


def read_trusted_json(
    path: str | os.PathLike[str], *, max_bytes: int, root_ok: bool = False, what: str | None = None, links: int = 1
) -> dict[str, Any]:
    """The JSON object in a file wattwise reads back (`read_trusted`, whose arguments it takes).

    Raises:
        FileNotFoundError: there is no file at `path`.
        UntrustedFile: it cannot be trusted (see `read_trusted`).
        ValueError: it is not UTF-8 text holding one JSON object (nesting too deep included).
    """
    data = read_trusted(path, max_bytes=max_bytes, root_ok=root_ok, what=what, links=links)
    try:
        content = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 text (byte {err.start})") from None
    except RecursionError:
        raise ValueError("not JSON (nested too deeply)") from None
    except ValueError as err:
        raise ValueError(f"not JSON ({err})") from None
    if not isinstance(content, dict):
        raise ValueError(f"not a JSON object (a {type(content).__name__})")
    return content


def set_aside(path: str | os.PathLike[str]) -> Path:
    """Rename a file wattwise cannot use to `NAME.rejected` beside it, out of the way of later reads.

    A link is renamed, never followed. Returns the new path.

    Raises:
        OSError: it cannot be renamed (gone meanwhile, or a folder the user may not write).
    """
    source = Path(path)
    rejected = source.with_name(source.name + ".rejected")
    os.replace(source, rejected)
    return rejected


def set_aside_saying(path: str | os.PathLike[str]) -> str:
    """`set_aside` the file and say where it went, for the warning that names it.

    Returns:
        "kept as NAME.rejected", or, when it cannot be renamed, why and that it is for the user to remove.
    """
    try:
        return f"kept as {set_aside(path)}"
    except OSError as err:
        return f"not set aside ({err.strerror or err}): remove it"


def set_aside_if_mine(path: str | os.PathLike[str]) -> str:
    """Where a file wattwise cannot use ends up, for the warning that names it.

    One of the user's own is set aside (`set_aside_saying`); another user's (in a shared `WATTWISE_HOME`)
    is theirs to keep and stays where it is.

    Returns:
        "kept as NAME.rejected", why it could not be set aside, or "left as it is".
    """
    return set_aside_saying(path) if file_owner(path) == os.geteuid() else "left as it is"
