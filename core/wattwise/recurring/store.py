"""Where recurring jobs keep their history: the store interface, an in-memory store, and `open_store`.

The history (job specs, runs, remembered power limits) is all the optimizer's state, so a store shared
by several machines makes them one optimizer. `SqlJobStore` (SQLAlchemy: a SQLite file by default,
PostgreSQL by URL) is the real one; `MemoryJobStore` serves the simulator and tests, where nothing
outlives the process. Starting a run is one atomic step (read the history, choose, insert), so two
processes starting runs at once never both take the same exploration step. The same database, found by
the same rules (`default_store_url`, `store_url`), also keeps every tuning run's chosen power limit
(`wattwise.limits_memory`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from wattwise.errors import UsageError
from wattwise.paths import state_dir
from wattwise.recurring.spec import JobSpec, Phase, RunRecord

#: Chooses a new run's batch size, phase and cost limit from the job's runs and remembered power limits.
ChooseFn = Callable[[Sequence[RunRecord], Mapping[int, float]], tuple[int, Phase, float]]

STORE_ENV = "WATTWISE_STORE"


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


class MemoryJobStore:
    """A `JobStore` in a dict: nothing outlives the process (simulator, tests)."""

    def __init__(self) -> None:
        self._specs: dict[str, JobSpec] = {}
        self._runs: dict[str, list[RunRecord]] = {}
        self._least: dict[str, float] = {}
        self._limits: dict[str, dict[int, float]] = {}
        self._next_id = 1

    def register_job(self, spec: JobSpec, now_s: float) -> None:
        stored = self._specs.get(spec.name)
        if stored is not None:
            check_same_spec(stored, spec)
            return
        self._specs[spec.name] = spec
        self._runs[spec.name] = []
        self._least[spec.name] = math.inf
        self._limits[spec.name] = {}

    def get_job(self, name: str) -> JobSpec | None:
        return self._specs.get(name)

    def list_jobs(self) -> list[JobSpec]:
        return [self._specs[name] for name in sorted(self._specs)]

    def _job_runs(self, name: str) -> list[RunRecord]:
        if name not in self._runs:
            raise unknown_job(name)
        return self._runs[name]

    def _index(self, name: str, run_id: int) -> int:
        for index, run in enumerate(self._job_runs(name)):
            if run.run_id == run_id:
                return index
        raise unknown_run(name, run_id)

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> RunRecord:
        runs = self._job_runs(name)
        batch_size, phase, cost_limit = choose(tuple(runs), dict(self._limits[name]))
        run = RunRecord(
            run_id=self._next_id,
            batch_size=batch_size,
            phase=phase,
            cost_limit=cost_limit,
            state="open",
            started_at_s=now_s,
            updated_at_s=now_s,
            power_limit_w=self._limits[name].get(batch_size),
        )
        self._next_id += 1
        runs.append(run)
        return run

    def progress_run(
        self, name: str, run_id: int, *, epochs: int, energy_j: float, time_s: float, cost: float, now_s: float
    ) -> None:
        index = self._index(name, run_id)
        run = self._runs[name][index]
        if run.finished:
            raise finished_run(name, run_id)
        self._runs[name][index] = dataclasses.replace(
            run, epochs=epochs, energy_j=energy_j, time_s=time_s, cost=cost, updated_at_s=now_s
        )

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
        index = self._index(name, run_id)
        run = self._runs[name][index]
        if run.finished:
            raise finished_run(name, run_id)
        done = dataclasses.replace(
            run,
            state="reached" if reached else "failed",
            epochs=epochs,
            energy_j=energy_j,
            time_s=time_s,
            cost=cost,
            updated_at_s=now_s,
            power_limit_w=run.power_limit_w
            if run.power_limit_w is not None
            else self._limits[name].get(run.batch_size),
        )
        self._runs[name][index] = done
        if reached:
            self._least[name] = min(self._least[name], cost)
        return done

    def get_run(self, name: str, run_id: int) -> RunRecord:
        return self._runs[name][self._index(name, run_id)]

    def runs(self, name: str) -> list[RunRecord]:
        return list(self._job_runs(name))

    def least_reached_cost(self, name: str) -> float:
        self._job_runs(name)
        return self._least[name]

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        self._job_runs(name)
        self._limits[name][batch_size] = power_limit_w

    def power_limits(self, name: str) -> dict[int, float]:
        self._job_runs(name)
        return dict(self._limits[name])

    def reset_job(self, name: str) -> bool:
        if name not in self._specs:
            return False
        for table in (self._specs, self._runs, self._least, self._limits):
            del table[name]
        return True

    def close(self) -> None:
        """Nothing to release."""


def default_store_url() -> str:
    """`$WATTWISE_STORE`, else a SQLite file `jobs.sqlite` in wattwise's state directory."""
    env = os.environ.get(STORE_ENV)
    if env:
        return store_url(env)
    return store_url(str(state_dir() / "jobs.sqlite"))


def store_url(location: str) -> str:
    """A SQLAlchemy URL from a URL or a file path (a path means a SQLite file).

    `postgresql://` and `postgres://` URLs use the psycopg 3 driver.
    """
    location = location.strip()
    if not location:
        raise UsageError(f"the store location is empty; give a SQLite file path or a URL (or unset {STORE_ENV})")
    if "://" not in location:
        path = Path(location).expanduser().resolve()
        if path.is_dir():
            raise UsageError(f"the store {location} is a directory; give a SQLite file path (e.g. "
                             f"{Path(location) / 'jobs.sqlite'}) or a database URL")
        return f"sqlite:///{path}"
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    scheme, rest = location.split("://", 1)
    url = f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else location
    try:
        make_url(url)
    except (ArgumentError, ValueError) as err:
        shown = re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", location)
        raise UsageError(f"the store {shown!r} is not a database URL ({' '.join(str(err).split())}); give a "
                         "SQLite file path or a URL such as postgresql://user@host/db") from None
    return url


def open_store(location: str | None = None) -> JobStore:
    """The store at `location` (URL or SQLite path), `$WATTWISE_STORE`, or the default SQLite file."""
    from wattwise.recurring.sql_store import SqlJobStore

    return SqlJobStore(store_url(location) if location else default_store_url())
