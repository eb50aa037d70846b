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
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from wattwise.profile import ProfileEntry
from wattwise.record.summary import POWER_FILE, SUMMARY_FILE, WINDOWS_FILE, PowerLimitSummary, RunSummary
from wattwise.safe_files import UntrustedFile, json_text, read_trusted_json, write_text
from wattwise.store.history import RunRow
from wattwise.vocabulary import RunMode

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


def run_row(summary: RunSummary, *, run_id: str, folder: str | os.PathLike[str]) -> RunRow:
    """The history's row of a finished run, from its summary and its own folder."""
    limit = summary.power_limit
    mode = limit.mode if limit is not None and limit.mode in tuple(RunMode) else RunMode.MEASURE
    return RunRow(
        id=run_id,
        job=summary.job,
        framework=summary.framework,
        mode=mode,
        status=summary.status,
        start_time=summary.start_time,
        end_time=summary.end_time,
        devices=summary.device_names,
        time_s=summary.time_s,
        energy_j=summary.energy_j,
        energy_uncertainty_j=getattr(summary, "energy_uncertainty_j", None),
        power_limit_w=limit.chosen_power_limit_w if limit is not None else None,
        saving_j=limit.energy_saved_j if limit is not None and limit.mode != RunMode.CAP else None,
        time_cost_s=time_cost_s(limit),
        folder=str(Path(folder).absolute()),
        simulated=summary.simulated,
    )


def _kept_files(world_size: int) -> list[str]:
    """The files a run of `world_size` processes writes into its output folder."""
    return [SUMMARY_FILE, POWER_FILE, WINDOWS_FILE, *(f"windows-rank{rank}.csv" for rank in range(1, world_size))]


def keep_folder(output_dir: str | os.PathLike[str], run_id: str, *, world_size: int = 1) -> Path:
    """Give the run just written into `output_dir` its own folder, `runs/<run_id>`, and point `latest` at it.

    Each regular file the run wrote is hard-linked there (copied where the file system has no hard links);
    a link planted in the output folder is never followed.

    Returns:
        The run's own folder.

    Raises:
        OSError: the folder or the link cannot be made.
    """
    out = Path(output_dir)
    own = out / RUNS_FOLDER / run_id
    own.mkdir(parents=True, exist_ok=False)
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
    temporary = out / f".{LATEST}.{run_id}.tmp"
    os.symlink(Path(RUNS_FOLDER) / run_id, temporary)
    try:
        os.replace(temporary, latest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return own


#: Largest summary.json a late process reads back to add its note (a summary is a few kB).
MAX_SUMMARY_BYTES = 16 * 1024 * 1024
#: What the summary's note on processes that left no figures says after naming them (`no_figures_note`).
NO_FIGURES = " left no figures within "


def no_figures_note(ranks: Sequence[int], waited_s: float) -> str:
    """The summary's note naming the processes that left no figures while the main process waited."""
    return (
        f"{', '.join(f'rank {r}' for r in ranks)}{NO_FIGURES}{waited_s:g} s of the main process's end (a "
        "process still waiting in a collective for this one leaves them only once that collective fails): "
        "their energy is missing; each process restores its own GPU settings as it ends"
    )


def summary_written_without(output_dir: str | os.PathLike[str], rank: int, *, since_s: float) -> bool:
    """Whether `output_dir` holds a summary written after `since_s` (unix s) that says `rank` left no figures."""
    path = Path(output_dir) / SUMMARY_FILE
    try:
        if os.lstat(path).st_mtime < since_s:
            return False
        notes = read_trusted_json(path, max_bytes=MAX_SUMMARY_BYTES, links=2).get("notes")
    except (OSError, UntrustedFile, ValueError):
        return False
    if not isinstance(notes, list):
        return False
    named = [n.split(NO_FIGURES)[0].split(", ") for n in notes if isinstance(n, str) and NO_FIGURES in n]
    return any(f"rank {rank}" in ranks for ranks in named)


def add_late_note(output_dir: str | os.PathLike[str], note: str, *, late_file: str) -> None:
    """Add `note` to the summary in `output_dir` and in the run's own folder (`latest`); keep `late_file` there.

    For a process of the run that left its figures after the main process had written the summary.
    Each summary is read with the trust of every file read back and written whole under a new name.

    Raises:
        OSError, UntrustedFile, ValueError: a summary cannot be read or written.
    """
    out = Path(output_dir)
    own = out / LATEST
    targets = [out]
    if own.is_symlink():
        resolved = own.resolve()
        if resolved.parent == (out / RUNS_FOLDER).resolve() and resolved.is_dir():
            targets.append(resolved)
            with contextlib.suppress(OSError):
                shutil.copy2(out / late_file, resolved / late_file, follow_symlinks=False)
    for folder in targets:
        path = folder / SUMMARY_FILE
        raw = read_trusted_json(path, max_bytes=MAX_SUMMARY_BYTES, links=2)
        notes = raw.get("notes")
        raw["notes"] = [*(notes if isinstance(notes, list) else []), note]
        write_text(path, json_text(raw) + "\n")
