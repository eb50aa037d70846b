"""Every run is kept: its own folder under the output folder, and its row for the run history.

A run writes its files (summary.json, windows.csv, power.csv) into its output folder, as it always did, so
`wattwise report wattwise_runs/lightning` reads the last run there. At its end the main process keeps them:

    <output folder>/runs/<run id>/   the run's own folder: its files, hard links to those it wrote
    <output folder>/latest           a link to the last run's own folder

The next run into the same output folder replaces the files there (each is written whole under a new name
and moved into place), never the ones a run's own folder holds, so nothing a run wrote is overwritten.
The run's row (`wattwise.store.history.RunRow`, `run_row`) names its own folder; `wattwise.run.history`
records it in the store at the end of a run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path

from wattwise.copying import attributes, dataclass_of
from wattwise.errors import UsageError
from wattwise.profile import ProfileEntry
from wattwise.record.summary import (
    LATE_FILE,
    POWER_FILE,
    SUMMARY_FILE,
    WINDOWS_FILE,
    PowerLimitSummary,
    RankNote,
    RunSummary,
    never_applied,
    parse_summary,
    payback_lines,
)
from wattwise.safe_files import UntrustedFile, json_text, read_trusted_json, write_text
from wattwise.store.history import RunPayback, RunRow
from wattwise.vocabulary import RankNoteKind, RunMode

#: The folder of an output folder that holds each run's own folder.
RUNS_FOLDER = "runs"
#: The link, in an output folder, to the last run's own folder.
LATEST = "latest"


def time_cost_s(limit: PowerLimitSummary | None) -> float | None:
    """What the estimated saving cost in time (s; positive: slower), from the same profile windows.

    The steps run at the chosen limit times the difference of step time at the chosen and the highest
    limit: the time counterpart of `energy_saved_j`. None when no saving is estimated, or it cannot be told.
    """
    if limit is None or limit.energy_saved_j is None or limit.tuning is None or not limit.profile:
        return None
    steps = limit.tuning.steps_at_chosen
    top = max(limit.profile, key=lambda e: e.power_limit_w)
    chosen: ProfileEntry | None = next(
        (e for e in limit.profile if e.power_limit_w == limit.chosen_power_limit_w), None
    )
    if chosen is None or steps is None:
        return None
    return steps * (chosen.time_s - top.time_s)


def run_payback(limit: PowerLimitSummary | None) -> RunPayback | None:
    """The run's one saving for its row: summary.json's payback for the run, where its pages give it.

    None for a cap, tuning that did not finish, a chosen limit never applied, or no payback (as
    `wattwise.record.summary.payback_lines`, which every page gives the saving by).
    """
    if limit is None or limit.mode == RunMode.CAP or limit.payback is None or never_applied(limit):
        return None
    if (limit.tuning is not None and not limit.tuning.finished) or payback_lines(limit) is None:
        return None
    return dataclass_of(RunPayback, limit.payback)


def run_row(summary: RunSummary, *, run_id: str, folder: str | os.PathLike[str]) -> RunRow:
    """The history's row of a finished run, from its summary and its own folder."""
    limit = summary.power_limit
    mode = limit.mode if limit is not None and limit.mode in tuple(RunMode) else RunMode.MEASURE
    return RunRow(
        id=run_id,
        mode=mode,
        **attributes(summary, "job", "framework", "status", "start_time", "end_time", "time_s", "energy_j"),
        devices=summary.device_names,
        energy_uncertainty_j=getattr(summary, "energy_uncertainty_j", None),
        power_limit_w=limit.chosen_power_limit_w if limit is not None else None,
        saving_j=limit.energy_saved_j if limit is not None and limit.mode != RunMode.CAP else None,
        saving_uncertainty_j=(
            limit.energy_saved_uncertainty_j
            if limit is not None and limit.mode != RunMode.CAP and limit.energy_saved_j is not None
            else None
        ),
        time_cost_s=time_cost_s(limit),
        folder=str(Path(folder).absolute()),
        **attributes(summary, "simulated", "project"),
        payback=run_payback(limit),
    )


def _kept_files(world_size: int) -> list[str]:
    """The files a run of `world_size` processes writes into its output folder."""
    return [SUMMARY_FILE, POWER_FILE, WINDOWS_FILE, *(f"windows-rank{rank}.csv" for rank in range(1, world_size))]


def keep_folder(output_dir: str | os.PathLike[str], run_id: str, *, world_size: int = 1) -> Path:
    """Give the run just written into `output_dir` its own folder, `runs/<run_id>`, and point `latest` at it.

    Each regular file the run wrote is hard-linked there (copied where the file system has no hard links);
    a link planted in the output folder is never followed, nor is a `runs` that is a link. A `latest` that
    is not a link (a real folder or file of the user's) is left as it is: the run is kept all the same.

    Returns:
        The run's own folder.

    Raises:
        OSError: the folder cannot be made (`runs` is a file or a link, a full disk, no permission).
    """
    out = Path(output_dir)
    runs = out / RUNS_FOLDER
    try:
        kind = os.lstat(runs).st_mode
    except FileNotFoundError:
        runs.mkdir(parents=True, exist_ok=True)
    else:
        if not stat.S_ISDIR(kind):
            what = "a symbolic link" if stat.S_ISLNK(kind) else "not a folder"
            raise NotADirectoryError(errno.ENOTDIR, f"{what}, which wattwise does not follow or replace", str(runs))
    own = runs / run_id
    own.mkdir(exist_ok=False)
    for name in _kept_files(world_size):
        source = out / name
        try:
            if not stat.S_ISREG(os.lstat(source).st_mode):
                continue
        except FileNotFoundError:
            continue
        try:
            os.link(source, own / name, follow_symlinks=False)
        except OSError:
            shutil.copy2(source, own / name, follow_symlinks=False)
    latest = out / LATEST
    if os.path.lexists(latest) and not os.path.islink(latest):
        return own  # the user's own folder or file by that name: theirs, not replaced
    temporary = out / f".{LATEST}.{run_id}.tmp"
    os.symlink(Path(RUNS_FOLDER) / run_id, temporary)
    try:
        os.replace(temporary, latest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return own


#: Largest summary.json a late process reads back to tell whether it was left out (a summary is a few kB).
MAX_SUMMARY_BYTES = 16 * 1024 * 1024


def summary_written_without(output_dir: str | os.PathLike[str], rank: int, *, since_s: float) -> bool:
    """Whether `output_dir` holds a summary written after `since_s` (unix s) that says `rank` left no figures."""
    path = Path(output_dir) / SUMMARY_FILE
    try:
        if os.lstat(path).st_mtime < since_s:
            return False
        summary = parse_summary(read_trusted_json(path, max_bytes=MAX_SUMMARY_BYTES, links=2), where=str(path))
    except (OSError, UntrustedFile, ValueError, UsageError):
        return False
    return any(n.kind == RankNoteKind.NO_FIGURES and n.rank == rank for n in summary.rank_notes)


def leave_late_note(output_dir: str | os.PathLike[str], rank: int, energy_j: float, *, figures_file: str) -> None:
    """Say that `rank`'s figures came after the summary was written, in a note of its own beside the summary.

    The note (`LATE_FILE`) and the figures file go into the output folder and the run's own folder (`latest`);
    the summary's reader merges the note (`wattwise.record.files.merge_late_notes`). The main process's
    summary.json is never rewritten by another process.

    Raises:
        OSError: a note cannot be written.
    """
    out = Path(output_dir)
    own = out / LATEST
    targets = [out]
    if own.is_symlink():
        resolved = own.resolve()
        if resolved.parent == (out / RUNS_FOLDER).resolve() and resolved.is_dir():
            targets.append(resolved)
            with contextlib.suppress(OSError):
                shutil.copy2(out / figures_file, resolved / figures_file, follow_symlinks=False)
    note = RankNote(RankNoteKind.LATE, rank, detail=figures_file, energy_j=energy_j)
    for folder in targets:
        write_text(folder / LATE_FILE.format(rank=rank), json_text(note.to_dict()) + "\n")
