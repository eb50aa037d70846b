"""The store interface every store implements (`JobStore`), and the errors all of them raise alike.

The history (job specs, runs, remembered power limits) is all the recurring-job optimizer's state, so a
store shared by several machines makes them one optimizer. Starting a run is one atomic step (read the
history, choose, insert), so two processes starting runs at once never both take the same exploration
step. Implementations: `wattwise.store.sql.SqlJobStore` (SQLAlchemy: a SQLite file by default,
PostgreSQL by URL) and `wattwise.store.memory.MemoryJobStore` (nothing outlives the process).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from wattwise.errors import UsageError
from wattwise.recurring.spec import JobSpec, Phase, RunRecord

#: Chooses a new run's batch size, phase and cost limit from the job's runs and remembered power limits.
ChooseFn = Callable[[Sequence[RunRecord], Mapping[int, float]], tuple[int, Phase, float]]


class JobStore(Protocol):
    """History of recurring jobs. Times are seconds since the epoch, given by the caller."""

    def register_job(self, spec: JobSpec, now_s: float) -> None:
        """Create the job, or check that the stored one has the same settings (UsageError if not)."""

    def get_job(self, name: str) -> JobSpec | None:
        """The job's spec, or None when the store does not know it."""

    def list_jobs(self) -> list[JobSpec]:
        """Every job, by name."""

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> RunRecord:
        """Atomically: read the runs and power limits, call `choose`, insert the open run it chose."""

    def progress_run(
        self, name: str, run_id: int, *, epochs: int, energy_j: float, time_s: float, cost: float, now_s: float
    ) -> None:
        """Record an open run's progress so far (also its heartbeat)."""

    def finish_run(
        self,
        name: str,
        run_id: int,
        *,
        reached: bool,
        epochs: int,
        energy_j: float,
        time_s: float,
        cost: float,
        now_s: float,
    ) -> RunRecord:
        """Close an open run with its result."""

    def get_run(self, name: str, run_id: int) -> RunRecord:
        """One run (UsageError when unknown)."""

    def runs(self, name: str) -> list[RunRecord]:
        """Every run of the job, in the order they started."""

    def least_reached_cost(self, name: str) -> float:
        """The least cost of a run that reached the target, infinite when none did."""

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        """Remember the power limit chosen for a batch size."""

    def power_limits(self, name: str) -> dict[int, float]:
        """Remembered power limits by batch size."""

    def reset_job(self, name: str) -> bool:
        """Forget the job and its whole history; False when the store did not know it."""

    def close(self) -> None:
        """Release connections."""


def spec_differences(stored: JobSpec, given: JobSpec) -> list[str]:
    """Names of the fields where two specs of the same job differ, with both values."""
    return [
        f"{f.name} (stored {getattr(stored, f.name)!r}, given {getattr(given, f.name)!r})"
        for f in dataclasses.fields(JobSpec)
        if getattr(stored, f.name) != getattr(given, f.name)
    ]


def check_same_spec(stored: JobSpec, given: JobSpec) -> None:
    """UsageError when a job is registered again with other settings."""
    diffs = spec_differences(stored, given)
    if diffs:
        raise UsageError(
            f"job {given.name!r} is already stored with other settings: {'; '.join(diffs)}; "
            f"use another job name, or forget its history with `wattwise jobs reset {given.name}`"
        )


def unknown_job(name: str) -> UsageError:
    return UsageError(f"no job named {name!r} in the store (see `wattwise jobs list`)")


def unknown_run(name: str, run_id: int) -> UsageError:
    return UsageError(f"job {name!r} has no run {run_id} (see `wattwise jobs show {name}`)")


def finished_run(name: str, run_id: int) -> UsageError:
    return UsageError(f"run {run_id} of job {name!r} has already finished; start a new run instead")
