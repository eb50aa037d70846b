"""The store interface every store implements (`JobStore`), and the errors all of them raise alike.

The history (job specs, runs, remembered power limits) is all the recurring-job optimizer's state, so a
store shared by several machines makes them one optimizer. Starting a run is one atomic step (read the
history, choose, insert), so two processes starting runs at once never both take the same exploration
step. Implementations: `wattwise.store.sql.SqlJobStore` (SQLAlchemy: a SQLite file by default,
PostgreSQL by URL) and `wattwise.store.memory.MemoryJobStore` (nothing outlives the process).

Every store accepts a run's figures within the same bounds (`check_run_figures`, `check_power_limit`), and
so does the outage spool when it reads them back from a file (`wattwise.store.spool`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypedDict

from wattwise.bounds import COST_J, POWER_LIMIT_W, RUN_ENERGY_J, RUN_TIME_S, TIMESTAMP_S, check_integer
from wattwise.copying import typed_dict_of
from wattwise.errors import UsageError
from wattwise.recurring.spec import JobSpec, Phase, StoredRun
from wattwise.vocabulary import RecurringRunState

#: Chooses a new run's batch size, phase and cost limit from the job's runs and remembered power limits.
ChooseFn = Callable[[Sequence[StoredRun], Mapping[int, float]], tuple[int, Phase, float]]


class JobDict(TypedDict):
    """A recurring job's settings (`JobSpec`), as `wattwise jobs show --json` gives them under `job`."""

    name: str
    batch_sizes: list[int]
    default_batch_size: int
    target_metric: float
    metric_mode: str
    max_epochs: int
    max_power_w: float
    eta: float
    beta: float


def job_dict(spec: JobSpec) -> JobDict:
    """A recurring job's settings as their JSON object (`JobDict`); a store's row of the job adds to it."""
    return typed_dict_of(JobDict, spec, batch_sizes=list(spec.batch_sizes))


#: The largest run id, epoch count or batch size a store keeps (its integer columns are 32-bit in PostgreSQL).
MAX_INTEGER = 2**31 - 1


class JobStore(Protocol):
    """History of recurring jobs: their specs, runs and remembered power limits.

    Every implementation passes the same contract tests (tests/integration/store/test_store_contract.py). Times are
    seconds since the epoch, given by the caller (the store never reads a clock); energy in joules,
    time in seconds, power in watts. A call naming a job the store does not know raises `UsageError`,
    except the questions `get_job` (None), `least_reached_cost` (infinite), `power_limits` (empty) and
    `reset_job` (False).

    The stores subclass it: `progress_run` and `finish_run` are written here once (the figures checked,
    then a store's own `_update_open` writes them).
    """

    def register_job(self, spec: JobSpec, now_s: float) -> None:
        """Create the job, or check that the stored one has the same settings.

        Raises:
            UsageError: the job is stored with other settings; the message names each field with both
                values.
        """

    def get_job(self, name: str) -> JobSpec | None:
        """The job's spec, or None when the store does not know it."""

    def list_jobs(self) -> list[JobSpec]:
        """Every job, by name."""

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> StoredRun:
        """Atomically: read the runs and power limits, call `choose`, insert the open run it chose.

        Two processes starting runs of one job at once each see the other's run, so they never both
        take the same exploration step.

        Args:
            name: The job.
            choose: Given the job's runs (in the order they started) and its power limits by batch
                size, returns the new run's batch size, phase and cost limit (joules; infinite: none).
            now_s: The run's start.

        Returns:
            The open run, with the power limit remembered for its batch size (None: none yet).
        """

    def progress_run(
        self, name: str, run_id: int, *, epochs: int, energy_j: float, time_s: float, cost: float, now_s: float
    ) -> None:
        """Record an open run's progress so far (also its heartbeat).

        Raises:
            UsageError: the run is unknown or has finished, or a figure is outside its bound
                (`check_run_figures`).
        """
        check_run_figures(epochs=epochs, energy_j=energy_j, time_s=time_s, cost=cost, now_s=now_s)
        self._update_open(
            name,
            run_id,
            {"epochs": epochs, "energy_j": energy_j, "time_s": time_s, "cost": cost, "updated_at_s": now_s},
        )

    def finish_run(
        self,
        name: str,
        run_id: int,
        *,
        reached: bool,
        epochs: int,
        energy_j: float | None,
        time_s: float,
        cost: float | None,
        now_s: float,
    ) -> StoredRun:
        """Close an open run with its result (`energy_j` and `cost` None: nothing was measured).

        Returns:
            The finished run (`reached` or `failed`), with the power limit remembered for its batch size
            by now when it started without one.

        Raises:
            UsageError: the run is unknown or has finished with another result, or a figure is outside its
                bound (`check_run_figures`).
        """
        check_run_figures(epochs=epochs, energy_j=energy_j, time_s=time_s, cost=cost, now_s=now_s)
        return self._update_open(
            name,
            run_id,
            {
                "state": RecurringRunState.REACHED if reached else RecurringRunState.FAILED,
                "epochs": epochs,
                "energy_j": energy_j,
                "time_s": time_s,
                "cost": cost,
                "updated_at_s": now_s,
            },
        )

    def _update_open(self, name: str, run_id: int, values: dict[str, Any]) -> StoredRun:
        """Write `values` to the open run `run_id`: each store's own part of `progress_run` and `finish_run`.

        `values` are the run's fields by name (`StoredRun`'s), checked: its progress, or its result with its
        `state`; a result also takes the power limit remembered by now for the run's batch size when the run
        started without one.

        Returns:
            The run as written.

        Raises:
            UsageError: the run is unknown or has finished (a store may take a retried write of the result
                the run already holds as done).
        """

    def get_run(self, name: str, run_id: int) -> StoredRun:
        """One run.

        Raises:
            UsageError: the store has no such run.
        """

    def runs(self, name: str) -> list[StoredRun]:
        """Every run of the job, in the order they started."""

    def least_reached_cost(self, name: str) -> float:
        """The least cost of a run that reached the target; infinite when none did (or no such job)."""

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        """Remember the power limit chosen for a batch size (replacing an earlier one).

        Raises:
            UsageError: the job is unknown, or the limit is outside its bound (`check_power_limit`).
        """

    def power_limits(self, name: str) -> dict[int, float]:
        """Remembered power limits by batch size (empty for a job the store does not know)."""

    def reset_job(self, name: str) -> bool:
        """Forget the job and its whole history (runs, power limits).

        Returns:
            False when the store did not know the job.
        """

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
    """Refuse to register a job again with other settings.

    Raises:
        UsageError: naming each field that differs, with both values, and how to start afresh.
    """
    diffs = spec_differences(stored, given)
    if diffs:
        raise UsageError(
            f"job {given.name!r} is already stored with other settings: {'; '.join(diffs)}; "
            f"use another job name, or forget its history with `wattwise jobs reset {given.name}`"
        )


def unknown_job(name: str) -> UsageError:
    """The error for a job the store does not know, pointing at `wattwise jobs list`."""
    return UsageError(f"no job named {name!r} in the store (see `wattwise jobs list`)")


def unknown_run(name: str, run_id: int) -> UsageError:
    """The error for a run the job does not have, pointing at `wattwise jobs show`."""
    return UsageError(f"job {name!r} has no run {run_id} (see `wattwise jobs show {name}`)")


def finished_run(name: str, run_id: int) -> UsageError:
    """The error for writing to a run that has already finished."""
    return UsageError(f"run {run_id} of job {name!r} has already finished; start a new run instead")


def check_run_figures(*, epochs: object, energy_j: object, time_s: object, cost: object, now_s: object) -> None:
    """Refuse a run's figures that no run has: what every store accepts as a run's progress or result.

    The bounds are `wattwise.bounds`' (energy and time from zero, the cost, a point in time), the same for
    the spooled results read back from a file; each figure must be a number (an int or a float), the
    epochs an integer.

    Args:
        epochs: epochs done (None: not given, as a spooled result may leave it).
        energy_j: the run's energy so far (J); None for a result with nothing measured.
        time_s: the run's time so far (s).
        cost: the job's cost of that energy and time (J); None when the energy is.
        now_s: when, in the caller's clock (s).

    Raises:
        UsageError: naming the first figure that is wrong, its range and its value.
    """
    if epochs is not None:
        check_integer(epochs, "epochs", low=0, high=MAX_INTEGER)
    if energy_j is not None or cost is not None:  # both None: nothing was measured
        RUN_ENERGY_J.check_number(energy_j, "energy_j")
        COST_J.check_number(cost, "cost")
    RUN_TIME_S.check_number(time_s, "time_s")
    TIMESTAMP_S.check_number(now_s, "now_s")


def check_power_limit(power_limit_w: object) -> None:
    """Refuse a power limit no GPU takes (`wattwise.bounds.POWER_LIMIT_W`): what every store remembers.

    Raises:
        UsageError: naming `power_limit_w`, its range and its value.
    """
    POWER_LIMIT_W.check_number(power_limit_w, "power_limit_w")
