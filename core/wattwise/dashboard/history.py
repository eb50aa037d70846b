"""What the dashboard reads: the store's run history and recurring jobs, and each run's folder.

One `History` per server, on one store (a SQLite file path or a database URL; None: `$WATTWISE_STORE`,
else the default file). Each call opens the store and closes it, so the pages always show what the store
holds now, and a store shared with running jobs is never held open. Nothing is written: the store is
opened read-only (never created, migrated, locked for writing or delivered to).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wattwise.errors import UsageError
from wattwise.record.files import RunDir, read_run_dir
from wattwise.record.summary import SUMMARY_FILE
from wattwise.store.base import unknown_job
from wattwise.store.factory import default_store_url, store_url
from wattwise.store.runs import RunListing, get_run, get_runs, list_history, list_runs, store_exists

if TYPE_CHECKING:
    from wattwise.recurring.spec import JobSpec, StoredRun
    from wattwise.recurring.summary import JobSummary
    from wattwise.store.limits_memory import RememberedLimit
    from wattwise.store.runs import RunRow
    from wattwise.store.sql import SqlJobStore


@dataclass(frozen=True)
class RecurringJob:
    """A recurring job as the store holds it: its settings, runs, summary and limits by batch size."""

    spec: JobSpec
    runs: list[StoredRun]
    summary: JobSummary
    limits: dict[int, float]


@dataclass(frozen=True)
class JobHistory:
    """Everything the store holds of one job name: its recurring job, remembered limits and runs."""

    name: str
    #: None when the name is no recurring job (a `job=` of tuned runs).
    recurring: RecurringJob | None
    #: The power limits remembered for the job, by memory key (GPU model and count, batch size).
    remembered: dict[str, RememberedLimit]
    #: Its runs in the run history, oldest first.
    runs: list[RunRow]

    @property
    def simulated(self) -> bool:
        """Whether a run of the job in the history ran on a simulated GPU (its figures are then modelled)."""
        return any(r.simulated for r in self.runs)


class History:
    """The run history and the recurring jobs of one store, read afresh at each call.

    Args:
        location: A SQLite file path or a database URL; None: `$WATTWISE_STORE`, else the default file.

    Raises:
        UsageError: `location` is not a store location.
    """

    def __init__(self, location: str | None = None) -> None:
        self.url = store_url(location) if location else default_store_url()

    @property
    def shown(self) -> str:
        """The store as the pages name it (a URL's password hidden)."""
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string()

    def runs(self) -> list[RunRow]:
        """Every run of the history, oldest first (none for a store that does not exist yet)."""
        return list_runs(location=self.url)

    def listing(self) -> RunListing:
        """Every run of the history, oldest first, and the rows that do not read as runs (listed by id)."""
        return list_history(location=self.url)

    def run(self, run_id: str) -> RunRow:
        """One run, by id or a prefix only it has.

        Raises:
            UsageError: no such run, or the prefix is ambiguous.
        """
        return get_run(run_id, location=self.url)

    def several(self, run_ids: Sequence[str]) -> list[RunRow]:
        """Runs by id, in the order given (`run` each)."""
        return get_runs(list(run_ids), location=self.url)

    def jobs(self) -> list[JobSummary]:
        """Every recurring job, summarised, by name."""
        from wattwise.recurring.summary import summarize

        if not store_exists(self.url):
            return []
        store = self._open()
        try:
            if not store.holds_tables:
                return []
            return [summarize(s, store.runs(s.name), store.power_limits(s.name)) for s in store.list_jobs()]
        finally:
            store.close()

    def job(self, name: str) -> JobHistory:
        """One job, whole: its recurring job, remembered limits and runs.

        Raises:
            UsageError: the store knows nothing of the job.
        """
        from wattwise.names import check_job_name
        from wattwise.recurring.summary import summarize
        from wattwise.store.limits_memory import LimitsMemory

        check_job_name(name, setting="name")
        if not store_exists(self.url):
            raise unknown_job(name)
        store = self._open()
        try:
            if not store.holds_tables:
                raise unknown_job(name)
            spec = store.get_job(name)
            recurring = None
            if spec is not None:
                runs, limits = store.runs(name), store.power_limits(name)
                recurring = RecurringJob(spec, runs, summarize(spec, runs, limits), limits)
        finally:
            store.close()
        found = JobHistory(
            name,
            recurring,
            LimitsMemory(self.url, read_only=True).remembered(name),
            list_runs(job=name, location=self.url),
        )
        if recurring is None and not found.remembered and not found.runs:
            raise unknown_job(name)
        return found

    def job_names(self) -> list[str]:
        """The jobs named by runs of the history, by name."""
        return sorted({r.job for r in self.runs() if r.job})

    def _open(self) -> SqlJobStore:
        from wattwise.store.sql import READER_LOCK_TIMEOUT_S, SqlJobStore

        return SqlJobStore(self.url, read_only=True, lock_timeout_s=READER_LOCK_TIMEOUT_S)


def run_folder(row: RunRow) -> RunDir | None:
    """The run's folder as read (summary.json, power.csv), or None when it is gone.

    Raises:
        UsageError: the folder is there but damaged, or its summary holds what no run can (naming the file
            and the field: `wattwise.record.report.check_summary`, as `wattwise report` reads it).
    """
    from wattwise.record.report import check_summary

    folder = Path(row.folder)
    if not os.path.isfile(folder / SUMMARY_FILE):
        return None
    run = read_run_dir(folder)
    check_summary(run)
    return run


def folder_gone(row: RunRow) -> UsageError:
    """The error for a run whose folder no longer holds its summary."""
    return UsageError(
        f"run {row.id}: its folder {row.folder} holds no {SUMMARY_FILE} any more (moved or deleted); "
        f"`wattwise runs show {row.id}` has what the history keeps of it"
    )
