"""Putting back the GPU settings a dead process left changed, and reporting what is left.

A journal is stale when its lock can be taken: the kernel drops an flock when its process dies, so a
recycled pid never makes a dead run's journal look alive. A journal still held by a live wattwise process
is never touched. A journal that cannot be trusted or read is reported, skipped and kept; one that cannot
be fully restored is kept with what failed, so the next attempt retries it. Recovery runs when a guard
starts (before it reads any device) and in `wattwise restore`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattwise.devices.base import DeviceSpec
from wattwise.safe_files import lock_descriptor, private_folder_problem
from wattwise.settings import journal as journal_file
from wattwise.settings.apply import RESTORE_ERRORS, apply_setting, describe, read_setting, setting_words
from wattwise.settings.journal import (
    Journal,
    JournalChange,
    JournalProblem,
    journal_dir,
    journal_files,
    journal_folder_problem,
    read_journal,
)
from wattwise.settings.locks import device_key, held_here, lock_holder, probe, try_flock


@dataclass
class RestoreResult:
    """What a restore did.

    Settings put back, the ones that could not be (with the reason), and journals left alone because a
    live wattwise process still holds them.
    """

    restored: list[str]
    failed: list[str]
    held: list[str] = field(default_factory=list)


@dataclass
class JournalStatus:
    """One journal in the folder: its owner is alive (`holder`) or gone, or it cannot be used (`problem`)."""

    path: Path
    journal: Journal | None
    #: The live process holding it (its pid when known, else 0); None when the journal is stale.
    holder: int | None
    problem: str | None = None


def journal_statuses(directory: str | os.PathLike[str] | None = None) -> tuple[list[JournalStatus], str | None]:
    """Every journal of this host in the folder, and why the folder itself cannot be trusted, if it cannot.

    Read-only (takes no lock, changes nothing), for `wattwise devices`.
    """
    folder = Path(directory) if directory is not None else journal_dir()
    if not folder.exists():
        return [], None
    problem = journal_folder_problem(folder)
    if problem:
        return [], problem
    out = []
    for path in journal_files(folder):
        holder = probe(path.with_suffix(".lock"))
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


def recover_stale_journals(
    directory: str | os.PathLike[str] | None = None, *, include_live: bool = False
) -> RestoreResult:
    """Restore the settings recorded by processes on this host that died without restoring them.

    A journal is stale when its lock can be taken, whatever its pid. A journal still held by a live
    wattwise process is never touched: it is listed in `held`, or, with `include_live`
    (`wattwise restore --force`), reported as a failure naming the process. A journal that cannot be
    trusted or read is reported, skipped and kept; one that cannot be fully restored is kept with what
    failed, so the next attempt can retry.

    Args:
        directory: the journal folder (default `journal_dir()`).
        include_live: report journals of live processes as failures instead of `held`.

    Returns:
        What was restored, what failed (with the reason), and what live processes hold.
    """
    folder = Path(directory) if directory is not None else journal_dir()
    result = RestoreResult([], [])
    if not folder.exists():
        return result
    problem = journal_folder_problem(folder)
    if problem:
        result.failed.append(f"journal folder {folder}: {problem}; not restoring anything from it")
        return result
    for path in journal_files(folder):
        lock = path.with_suffix(".lock")
        if held_here(lock):
            continue  # this process's own guard
        try:
            fd = lock_descriptor(lock)
        except OSError as err:
            if lock.exists():
                result.failed.append(f"{path}: cannot open its lock {lock} ({err.strerror}); skipped")
                continue
            fd = -1  # no lock file and none can be made (a full disk): nobody holds it
        try:
            if fd >= 0 and not try_flock(fd):
                _live(result, path, lock, include_live)
                continue
            _recover_one(path, result, named_folder=directory is not None)
        finally:
            if fd >= 0:
                os.close(fd)
    return result


def _live(result: RestoreResult, path: Path, lock: Path, include_live: bool) -> None:
    pid = lock_holder(lock)
    who = f"wattwise process PID {pid}" if pid else "a live wattwise process"
    if include_live:
        result.failed.append(
            f"{path}: held by {who}, still running: not restored (--force never takes a GPU "
            f"from a running wattwise process; stop it{f' (kill {pid})' if pid else ''} and it "
            "restores its settings itself)"
        )
    else:
        result.held.append(f"{path}: held by {who}, still running (it restores its settings when it ends)")


def _recover_one(path: Path, result: RestoreResult, *, named_folder: bool = False) -> None:
    """Restore one stale journal (its lock held by the caller); delete it once everything is back.

    `named_folder`: the journal folder was named (`--journal-dir`, a node agent's state dir): a simulated
    GPU's state file may then lie outside the user's state dir (the agent's `--simulated-dir`), in a
    folder that `_simulated_folder_problem` trusts.
    """
    from wattwise.devices import open_spec

    try:
        found = read_journal(path, check_state_files=not named_folder)
    except FileNotFoundError:
        return  # its owner finished meanwhile
    except JournalProblem as err:
        result.failed.append(f"{path}: {err}; skipped (the file is kept: inspect or delete it)")
        return
    if found.host != socket.gethostname():
        return
    remaining: list[JournalChange] = []
    for change in found.changes:
        spec, setting, value = change["device"], change["setting"], change["original"]
        state_file = spec.get("state_file") if spec["backend"] == "simulated" else None
        if state_file is not None and not Path(state_file).parent.is_dir():
            result.restored.append(
                f"{describe(spec, setting, value)} (nothing to do: the simulated GPU's state folder is gone)"
            )
            continue
        problem = _simulated_folder_problem(spec) if named_folder and state_file is not None else None
        if problem:
            result.failed.append(f"{describe(spec, setting, value)}: {problem}; not restored")
            remaining.append(change)
            continue
        try:
            apply_setting(open_spec(spec), setting, value)
            result.restored.append(describe(spec, setting, value))
        except RESTORE_ERRORS as err:
            result.failed.append(f"{describe(spec, setting, value)}: {err}")
            remaining.append(change)
    try:
        if remaining:
            found.raw["changes"] = remaining
            journal_file.write_journal(path, found.raw)
        else:
            path.unlink()
            with contextlib.suppress(OSError):
                path.with_suffix(".lock").unlink()
    except OSError as err:
        result.failed.append(f"{path}: cannot update it ({err.strerror}); the next restore retries it")


def _simulated_folder_problem(spec: DeviceSpec) -> str | None:
    """Why a simulated GPU's state file named by a journal in a named folder is not to be written; None if fine.

    It must be `gpu<index>.json`, by an absolute path without symbolic links, in a folder of this user's
    (or root's) that no one else may write: what an agent's `--simulated-dir` is.
    """
    raw = spec.get("state_file")
    if not isinstance(raw, str) or not os.path.isabs(raw):
        return f"its state_file {raw!r} is not an absolute path"
    path = Path(os.path.normpath(raw))
    if path.name != f"gpu{spec.get('index')}.json" or os.path.realpath(path.parent) != str(path.parent):
        return f"its state_file {raw} is not gpu{spec.get('index')}.json in a folder reached without symbolic links"
    problem = private_folder_problem(path.parent)
    return f"its state folder {path.parent} {problem.removeprefix('the folder ')}" if problem else None


def _current(spec: DeviceSpec, setting: str) -> Any:
    """The setting now on the device (opened from a checked journal's spec); raises when unreadable."""
    from wattwise.devices import open_spec

    return read_setting(open_spec(spec), setting)


def leftover_lines(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """What `wattwise devices` says about the journal, one line each.

    Settings a dead process left changed (to restore with `wattwise restore`), settings a running wattwise
    process holds, and journals it cannot use. Read-only: restores nothing, takes no lock.
    """
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
            where = f"{spec['backend']} {device_key(spec)}"
            if status.holder is not None:
                pid = status.holder or status.journal.pid
                lines.append(
                    f"in use: {where} changed by running wattwise process PID {pid}, original "
                    f"{setting_words(setting, original)}"
                )
                continue
            try:
                now = setting_words(setting, _current(spec, setting))
            except Exception:  # a device that cannot be opened still has a leftover to report
                now = f"{setting_words(setting, original).split(' ')[0]} setting (current value unreadable)"
            lines.append(
                f"leftover: {where} {now} from dead process PID {status.journal.pid}, original "
                f"{setting_words(setting, original)}; run `wattwise restore`"
            )
    return lines
