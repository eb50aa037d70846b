"""The settings journal: the original value of every changed GPU setting, on disk before the change.

A journal is one small JSON file, written atomically and fsynced, 0600 in a 0700 folder:
`{"pid": P, "host": H, "created": T, "changes": [{"device": SPEC, "setting": S, "original": V}, ...]}`
(`JournalFile`, each change a `JournalChange`), where SPEC is what `wattwise.devices.open_spec` opens again
(a backend the guard journals, `wattwise.devices.journalled_backends`, the GPU's index, ...).

A journal is trusted only when it and its folder belong to the user reading it and are not writable by
others, and it is a regular file (no symbolic link, no other hard link): the checks of every file
wattwise reads back, `wattwise.safe_files.trust_problem` and `read_trusted`. Every field is checked before
anything in it is used. A journal that fails a check raises `JournalProblem` naming the file's problem.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from wattwise import safe_files
from wattwise.codec import is_whole
from wattwise.devices import journalled_backends
from wattwise.devices.base import DeviceError, DeviceSpec
from wattwise.safe_files import (
    UntrustedFile,
    owner_problem,
    read_trusted_json,
    state_dir,
    trust_problem,
    write_text,
)
from wattwise.settings.apply import POWER_LIMIT, SM_CLOCKS, WORKLOAD_PROFILES, SettingValue, finite_number

#: A journal is a few hundred bytes; anything far larger is not one.
MAX_JOURNAL_BYTES = 1 << 20
#: The largest pid Linux hands out (`/proc/sys/kernel/pid_max` at most 2**22).
MAX_PID = 1 << 22
#: The names of journal files in a journal folder.
JOURNAL_NAME = re.compile(r"^[^/\x00]+\.json$")


class _Change(TypedDict):
    #: The device's spec, as `Device.spec()` gives it and `wattwise.devices.open_spec` opens it again.
    device: DeviceSpec
    #: `POWER_LIMIT` or `SM_CLOCKS`.
    setting: str
    #: The value to restore: watts for a power limit, `[min, max]` MHz or null for locked clocks, the
    #: workload power profiles requested.
    original: SettingValue


class JournalledHolder(TypedDict):
    """Who held the GPU when the node agent journalled it, so that its next start keeps a live holder's lease.

    The process, its user, job name and batch job id, its process group (0: none), and the start times
    (clock ticks since boot) that tell the process and the group's leader from later ones of those ids.
    """

    pid: int
    uid: int
    job: str
    job_id: str
    pgid: int
    start_ticks: int
    pgid_ticks: int


class JournalChange(_Change, total=False):
    """One setting to restore. The node agent adds who holds the GPU and the value it set (others ignore both)."""

    holder: JournalledHolder
    applied: SettingValue


class _File(TypedDict):
    pid: int
    host: str
    changes: list[JournalChange]


class JournalFile(_File, total=False):
    """A journal on disk: the process that changed the settings, its host, when, and what to restore."""

    #: Unix seconds when it was written (always written; not needed to restore).
    created: float


def journal_dir() -> Path:
    """The folder of this user's journals: `journal` in the state dir (`wattwise.safe_files.state_dir`)."""
    return state_dir() / "journal"


class JournalError(DeviceError):
    """The journal cannot be written, or its folder cannot be trusted: the change is not made."""


class JournalProblem(Exception):
    """A journal that cannot be trusted or understood; the message says why."""


# -- trust ----------------------------------------------------------------------------------------------
def journal_folder_problem(folder: Path) -> str | None:
    """Why the journal folder cannot be trusted, or None. Its parent may be a sticky shared folder."""
    problem = safe_files.private_folder_problem(folder)
    if problem:
        return problem
    with contextlib.suppress(OSError):
        return owner_problem("its parent folder", os.stat(folder.parent), sticky_ok=True)
    return None


def ensure_folder(folder: Path) -> None:
    """Create the journal folder (0700) or check the existing one.

    Raises:
        JournalError: it cannot be created, or it cannot be trusted.
    """
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    except OSError as err:
        raise JournalError(
            f"cannot create the journal folder {folder} ({err.strerror}): no GPU setting is changed"
        ) from None
    problem = journal_folder_problem(folder)
    if problem:
        raise JournalError(
            f"journal folder {folder}: {problem}; refusing to record GPU settings there (chmod 700 it, as its owner)"
        )


# -- checking -------------------------------------------------------------------------------------------
def _check_state_file(spec: DeviceSpec) -> None:
    """A simulated GPU's state file must be `gpu<index>.json` in a folder of yours inside your state dir."""
    raw = spec.get("state_file")
    if not isinstance(raw, str) or not os.path.isabs(raw):
        raise JournalProblem(f"simulated GPU state_file {raw!r} is not an absolute path")
    path = Path(os.path.normpath(raw))
    if path.name != f"gpu{spec['index']}.json":
        raise JournalProblem(f"simulated GPU state_file {raw} is not named gpu{spec['index']}.json")
    root = Path(os.path.realpath(state_dir()))
    if os.path.realpath(path.parent) != str(path.parent) or root not in path.parents:
        raise JournalProblem(
            f"simulated GPU state_file {raw} is not inside your state dir {root} (or its path has a symbolic link)"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise JournalProblem(f"simulated GPU state_file {raw}: {err.strerror}") from None
    problem = trust_problem(st)
    if problem:
        raise JournalProblem(f"simulated GPU state_file {raw} {problem}")


def _check_change(change: Any, *, check_state_files: bool) -> None:
    if not isinstance(change, dict):
        raise JournalProblem(f"a change is not an object: {change!r}")
    spec, setting, value = change.get("device"), change.get("setting"), change.get("original", ...)
    backends = journalled_backends()
    if not isinstance(spec, dict) or spec.get("backend") not in backends:
        raise JournalProblem(f"a change names no GPU of backend {', '.join(backends)}: {spec!r}")
    if not isinstance(spec.get("index"), int) or isinstance(spec.get("index"), bool) or spec["index"] < 0:
        raise JournalProblem(f"a change names no GPU index: {spec!r}")
    if setting == POWER_LIMIT:
        if not (finite_number(value) and value > 0):
            raise JournalProblem(f"original power limit {value!r} is not a positive number of watts")
    elif setting == SM_CLOCKS:
        ok = value is None or (
            isinstance(value, list)
            and len(value) == 2
            and all(is_whole(v) and 0 < v < 100_000 for v in value)
            and value[0] <= value[1]
        )
        if not ok:
            raise JournalProblem(f"original locked clocks {value!r} are neither null nor [min, max] MHz")
    elif setting == WORKLOAD_PROFILES:
        if not (
            isinstance(value, list)
            and len(value) <= 255
            and all(isinstance(v, str) and re.fullmatch(r"[a-z0-9_]{1,40}", v) for v in value)
        ):
            raise JournalProblem(f"original workload power profiles {value!r} are not a list of profile names")
    else:
        raise JournalProblem(f"unknown setting {setting!r}" if value is not ... else "a change has no original")
    if spec["backend"] == "simulated":
        rng = spec.get("limit_range_w")
        if rng is not None and not (
            isinstance(rng, list) and len(rng) == 2 and all(finite_number(v) for v in rng) and 0 < rng[0] < rng[1]
        ):
            raise JournalProblem(f"simulated GPU limit_range_w {rng!r} is not [min, max] watts")
        if check_state_files:
            _check_state_file(cast(DeviceSpec, spec))


# -- reading and writing --------------------------------------------------------------------------------
@dataclass
class Journal:
    """A journal read from disk and checked."""

    path: Path
    pid: int
    host: str
    changes: list[JournalChange]
    #: The file's object as read (checked), rewritten with fewer changes when some are restored.
    raw: JournalFile


def file_problem(path: Path) -> str | None:
    """Why the journal at `path` cannot be trusted (a symbolic link, not yours, writable by others).

    A check before use, such as the agent's at start: reading checks the open file itself.

    Returns:
        The reason, or None (also when there is no journal).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    return trust_problem(st, what="the journal")


def read_object(path: Path) -> dict[str, object]:
    """The JSON object in the journal file `path`, read only when the file can be trusted.

    Raises:
        JournalProblem: it cannot be trusted (`wattwise.safe_files.read_trusted`: not a regular file of yours,
            a symbolic link, too large), or it is not a JSON object.
        FileNotFoundError: it is gone (its owner finished meanwhile).
    """
    try:
        return read_trusted_json(path, max_bytes=MAX_JOURNAL_BYTES, what="the journal")
    except (UntrustedFile, ValueError) as err:
        raise JournalProblem(str(err)) from None


def check_changes(changes: Any, *, check_state_files: bool = True) -> list[JournalChange]:
    """The list of changes of a journal, each checked field by field.

    Args:
        changes: the `changes` of a journal read from disk.
        check_state_files: a simulated GPU's state file must lie in your state dir (off for the node agent,
            which restores the GPUs it has open and never opens a journal's spec).

    Raises:
        JournalProblem: names the first field that is wrong.
    """
    if not isinstance(changes, list):
        raise JournalProblem("no list of changes")
    for change in changes:
        _check_change(change, check_state_files=check_state_files)
    return cast(list[JournalChange], changes)


def check_journal(path: Path, content: dict[str, object], *, check_state_files: bool = True) -> Journal:
    """A journal's JSON object, checked field by field (see `check_changes`); JournalProblem says what is wrong."""
    pid, host = content.get("pid"), content.get("host")
    if not is_whole(pid) or not 0 < pid <= MAX_PID:
        raise JournalProblem(f"pid {pid!r} is not a process id")
    if not isinstance(host, str):
        raise JournalProblem(f"host {host!r} is not a host name")
    changes = check_changes(content.get("changes"), check_state_files=check_state_files)
    return Journal(path, pid, host, changes, cast(JournalFile, content))


def read_journal(path: Path, *, check_state_files: bool = True) -> Journal:
    """Read and check one journal.

    Raises:
        JournalProblem: it cannot be trusted or understood (the message says why).
        FileNotFoundError: it is gone (its owner finished meanwhile).
    """
    return check_journal(path, read_object(path), check_state_files=check_state_files)


def new_journal(changes: Sequence[JournalChange]) -> JournalFile:
    """The journal of this process holding `changes`."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "created": time.time(), "changes": list(changes)}


def write_journal(path: Path, content: JournalFile) -> None:
    """Write a journal atomically (a new 0600 file beside it, fsynced, moved over it, the folder synced).

    Raises:
        OSError: it cannot be written; the journal on disk is then as it was.
    """
    write_text(path, json.dumps(content), mode=0o600, sync_folder=True)


def save_changes(path: Path, changes: Sequence[JournalChange]) -> None:
    """Journal `changes` for this process at `path`, or remove the journal when there is none left.

    Raises:
        OSError: it cannot be written (nothing half-written: the journal on disk is then as it was).
    """
    if changes:
        write_journal(path, new_journal(changes))
    else:
        with contextlib.suppress(OSError):  # a journal left behind names settings already restored: harmless
            path.unlink()


def journal_files(folder: Path) -> list[Path]:
    """The journals in `folder`, by name (their lock files sit beside them, `.lock` for `.json`)."""
    return sorted(p for p in folder.glob("*.json") if JOURNAL_NAME.match(p.name))
