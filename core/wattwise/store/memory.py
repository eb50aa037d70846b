"""`MemoryJobStore`: a `JobStore` in a dict, for the simulator and tests, where nothing outlives the process."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wattwise.recurring.spec import JobSpec, StoredRun
from wattwise.store.base import (
    ChooseFn,
    JobStore,
    check_power_limit,
    check_same_spec,
    finished_run,
    unknown_job,
    unknown_run,
)


class MemoryJobStore(JobStore):
    """A `JobStore` in dicts: nothing outlives the process (the simulator, tests).

    It answers as the SQL store does (tests/integration/store/test_store_contract.py), without a database: no locks, as
    one process owns it.
    """

    def __init__(self) -> None:
        self._specs: dict[str, JobSpec] = {}
        self._runs: dict[str, list[StoredRun]] = {}
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

    def _job_runs(self, name: str) -> list[StoredRun]:
        if name not in self._runs:
            raise unknown_job(name)
        return self._runs[name]

    def _index(self, name: str, run_id: int) -> int:
        for index, run in enumerate(self._job_runs(name)):
            if run.run_id == run_id:
                return index
        raise unknown_run(name, run_id)

    def _open_run(self, name: str, run_id: int) -> tuple[int, StoredRun]:
        """Where run `run_id` of job `name` is in its list, and the run, which must still be open."""
        index = self._index(name, run_id)
        run = self._runs[name][index]
        if run.finished:
            raise finished_run(name, run_id)
        return index, run

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> StoredRun:
        runs = self._job_runs(name)
        batch_size, phase, cost_limit = choose(tuple(runs), dict(self._limits[name]))
        run = StoredRun(
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

    def _update_open(self, name: str, run_id: int, values: dict[str, Any]) -> StoredRun:
        index, run = self._open_run(name, run_id)
        if "state" in values and run.power_limit_w is None:  # a result: the limit remembered by now
            values["power_limit_w"] = self._limits[name].get(run.batch_size)
        done = dataclasses.replace(run, **values)
        self._runs[name][index] = done
        if done.reached and done.cost is not None:
            self._least[name] = min(self._least[name], done.cost)
        return done

    def get_run(self, name: str, run_id: int) -> StoredRun:
        return self._runs[name][self._index(name, run_id)]

    def runs(self, name: str) -> list[StoredRun]:
        return list(self._job_runs(name))

    def least_reached_cost(self, name: str) -> float:
        return self._least.get(name, math.inf)

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        check_power_limit(power_limit_w)
        self._job_runs(name)
        self._limits[name][batch_size] = power_limit_w

    def power_limits(self, name: str) -> dict[int, float]:
        return dict(self._limits.get(name, {}))

    def reset_job(self, name: str) -> bool:
        if name not in self._specs:
            return False
        for table in (self._specs, self._runs, self._least, self._limits):
            del table[name]
        return True

    def close(self) -> None:
        """Nothing to release."""
