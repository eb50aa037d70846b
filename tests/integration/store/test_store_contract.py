"""The store contract: what every `JobStore` does alike, checked on the in-memory, SQLite and PostgreSQL stores.

The recurring-job optimizer and `wattwise jobs` see a store only through `wattwise.store.JobStore`, so a
behaviour pinned here holds whichever store a user chooses. What only a store on a database does
(concurrent processes, WAL, outages, migrations) is tested in test_recurring_store.py,
test_store_outage.py and test_store_migrations.py. The PostgreSQL case uses the session's server
(`postgres_url` in conftest.py) and is skipped where no PostgreSQL binaries are installed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.stores import SHARED_JOB, sqlite_store_url
from wattwise.errors import UsageError
from wattwise.recurring.spec import JobSpec, Phase, StoredRun
from wattwise.store import JobStore, MemoryJobStore
from wattwise.store.sql import SqlJobStore

OTHER = dataclasses.replace(SHARED_JOB, name="another-job", batch_sizes=(8, 16), default_batch_size=8, beta=3.0)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    """Each store implementation, empty."""
    opened: JobStore
    if request.param == "memory":
        opened = MemoryJobStore()
    elif request.param == "sqlite":
        opened = SqlJobStore(sqlite_store_url(tmp_path))
    else:
        opened = SqlJobStore(request.getfixturevalue("fresh_postgres"))
    yield opened
    opened.close()


@dataclasses.dataclass
class Chooser:
    """A `ChooseFn` that always chooses the same, and remembers what it was shown."""

    batch_size: int
    phase: Phase = "explore"
    cost_limit: float = math.inf
    seen: list[tuple[list[StoredRun], dict[int, float]]] = dataclasses.field(default_factory=list)

    def __call__(self, runs: Sequence[StoredRun], limits: Mapping[int, float]) -> tuple[int, Phase, float]:
        self.seen.append((list(runs), dict(limits)))
        return self.batch_size, self.phase, self.cost_limit


def finish(
    store: JobStore, run: StoredRun, *, job: str = SHARED_JOB.name, reached: bool = True, cost: float = 310.0
) -> StoredRun:
    """Finish `run` of `job` after 2 epochs, 20 J and 2 s, at 7 s."""
    return store.finish_run(job, run.run_id, reached=reached, epochs=2, energy_j=20.0, time_s=2.0, cost=cost, now_s=7.0)


def test_a_registered_job_is_found_with_every_setting_as_given(store: JobStore) -> None:
    assert store.get_job(SHARED_JOB.name) is None and store.list_jobs() == []
    store.register_job(SHARED_JOB, 0.0)
    store.register_job(OTHER, 1.0)
    assert store.get_job(SHARED_JOB.name) == SHARED_JOB
    assert store.get_job(OTHER.name) == OTHER
    assert store.list_jobs() == [OTHER, SHARED_JOB]  # by name


def test_registering_a_job_again_with_other_settings_names_the_fields(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    store.register_job(SHARED_JOB, 1.0)
    changed = JobSpec(**{**SHARED_JOB.__dict__, "max_epochs": 9, "beta": 3.0})
    with pytest.raises(UsageError, match=r"max_epochs \(stored 5, given 9\).*beta.*jobs reset"):
        store.register_job(changed, 2.0)
    assert store.get_job(SHARED_JOB.name) == SHARED_JOB


def test_store_round_trip_and_reset(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    run = store.start_run(SHARED_JOB.name, lambda runs, limits: (32, "explore", float("inf")), 5.0)
    assert (run.batch_size, run.phase, run.state, run.power_limit_w) == (32, "explore", "open", None)
    store.set_power_limit(SHARED_JOB.name, 32, 175.0)
    store.progress_run(SHARED_JOB.name, run.run_id, epochs=1, energy_j=10.0, time_s=1.0, cost=155.0, now_s=6.0)
    done = store.finish_run(
        SHARED_JOB.name, run.run_id, reached=True, epochs=2, energy_j=20.0, time_s=2.0, cost=310.0, now_s=7.0
    )
    assert (done.state, done.power_limit_w, done.epochs, done.cost, done.updated_at_s) == (
        "reached",
        175.0,
        2,
        310.0,
        7.0,
    )
    assert store.least_reached_cost(SHARED_JOB.name) == 310.0
    assert store.power_limits(SHARED_JOB.name) == {32: 175.0}
    with pytest.raises(UsageError, match="already finished"):
        store.finish_run(SHARED_JOB.name, run.run_id, reached=True, epochs=2, energy_j=1, time_s=1, cost=1, now_s=8)
    with pytest.raises(UsageError, match="has no run 999"):
        store.get_run(SHARED_JOB.name, 999)
    assert store.reset_job(SHARED_JOB.name) is True
    assert store.get_job(SHARED_JOB.name) is None and store.reset_job(SHARED_JOB.name) is False
    with pytest.raises(UsageError, match="no job named"):
        store.runs(SHARED_JOB.name)


def test_a_started_run_is_open_with_what_was_chosen(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    run = store.start_run(SHARED_JOB.name, Chooser(64, "exploit", 1234.5), 5.0)
    assert run == StoredRun(
        run_id=run.run_id,
        batch_size=64,
        phase="exploit",
        state="open",
        started_at_s=5.0,
        updated_at_s=5.0,
        power_limit_w=None,
        cost_limit=1234.5,
        epochs=0,
        energy_j=None,
        time_s=None,
        cost=None,
    )
    assert store.get_run(SHARED_JOB.name, run.run_id) == run
    assert store.runs(SHARED_JOB.name) == [run]
    assert store.start_run(SHARED_JOB.name, Chooser(32), 6.0).cost_limit == math.inf


def test_choosing_sees_the_jobs_runs_and_power_limits_and_nothing_else(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    store.register_job(OTHER, 0.0)
    store.start_run(OTHER.name, Chooser(8), 1.0)
    store.set_power_limit(OTHER.name, 8, 150.0)
    first = store.start_run(SHARED_JOB.name, Chooser(16), 2.0)
    store.set_power_limit(SHARED_JOB.name, 16, 200.0)
    choose = Chooser(32)
    store.start_run(SHARED_JOB.name, choose, 3.0)
    assert choose.seen == [([first], {16: 200.0})]


def test_a_run_starts_with_the_power_limit_remembered_for_its_batch_size(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    store.set_power_limit(SHARED_JOB.name, 32, 180.0)
    store.set_power_limit(SHARED_JOB.name, 32, 190.0)  # replaces
    assert store.start_run(SHARED_JOB.name, Chooser(32), 1.0).power_limit_w == 190.0
    assert store.start_run(SHARED_JOB.name, Chooser(64), 2.0).power_limit_w is None
    assert store.power_limits(SHARED_JOB.name) == {32: 190.0}


def test_runs_are_listed_in_the_order_they_started_with_distinct_ids(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    store.register_job(OTHER, 0.0)
    started = [store.start_run(SHARED_JOB.name, Chooser(b), float(t)) for t, b in enumerate((64, 16, 128))]
    store.start_run(OTHER.name, Chooser(8), 9.0)
    assert [r.batch_size for r in store.runs(SHARED_JOB.name)] == [64, 16, 128]
    assert [r.run_id for r in store.runs(SHARED_JOB.name)] == [r.run_id for r in started]
    assert len({r.run_id for r in started}) == 3
    assert [r.batch_size for r in store.runs(OTHER.name)] == [8]


def test_progress_is_kept_until_the_run_finishes(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    run = store.start_run(SHARED_JOB.name, Chooser(32), 5.0)
    store.progress_run(SHARED_JOB.name, run.run_id, epochs=1, energy_j=10.0, time_s=1.0, cost=155.0, now_s=6.0)
    now = store.get_run(SHARED_JOB.name, run.run_id)
    assert (now.state, now.epochs, now.energy_j, now.time_s, now.cost) == ("open", 1, 10.0, 1.0, 155.0)
    assert (now.started_at_s, now.updated_at_s) == (5.0, 6.0)
    finish(store, run)
    with pytest.raises(UsageError, match="already finished"):
        store.progress_run(SHARED_JOB.name, run.run_id, epochs=3, energy_j=30.0, time_s=3.0, cost=1.0, now_s=8.0)
    assert store.get_run(SHARED_JOB.name, run.run_id).epochs == 2


def test_a_finished_run_keeps_its_result_and_the_limit_remembered_by_then(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    failed = store.start_run(SHARED_JOB.name, Chooser(16), 1.0)
    store.set_power_limit(SHARED_JOB.name, 16, 160.0)
    done = finish(store, failed, reached=False, cost=900.0)
    assert (done.state, done.reached, done.finished, done.power_limit_w) == ("failed", False, True, 160.0)
    assert store.get_run(SHARED_JOB.name, failed.run_id) == done


def test_the_least_reached_cost_counts_only_runs_that_reached(store: JobStore) -> None:
    store.register_job(SHARED_JOB, 0.0)
    assert store.least_reached_cost(SHARED_JOB.name) == math.inf
    finish(store, store.start_run(SHARED_JOB.name, Chooser(16), 1.0), reached=False, cost=10.0)
    assert store.least_reached_cost(SHARED_JOB.name) == math.inf
    finish(store, store.start_run(SHARED_JOB.name, Chooser(32), 2.0), cost=400.0)
    finish(store, store.start_run(SHARED_JOB.name, Chooser(64), 3.0), cost=300.0)
    finish(store, store.start_run(SHARED_JOB.name, Chooser(128), 4.0), cost=500.0)
    assert store.least_reached_cost(SHARED_JOB.name) == 300.0


def test_a_job_unknown_to_the_store_has_nothing_remembered(store: JobStore) -> None:
    assert store.least_reached_cost("nobody") == math.inf
    assert store.power_limits("nobody") == {}
    for call in (
        lambda: store.runs("nobody"),
        lambda: store.start_run("nobody", Chooser(16), 1.0),
        lambda: store.set_power_limit("nobody", 16, 100.0),
    ):
        with pytest.raises(UsageError, match=r"no job named 'nobody' .*wattwise jobs list"):
            call()


def test_resetting_a_job_forgets_its_history_and_only_its_own(store: JobStore) -> None:
    for spec in (SHARED_JOB, OTHER):
        store.register_job(spec, 0.0)
        store.set_power_limit(spec.name, spec.default_batch_size, 200.0)
        finish(store, store.start_run(spec.name, Chooser(spec.default_batch_size), 1.0), job=spec.name, cost=50.0)
    assert store.reset_job(SHARED_JOB.name) is True
    assert store.power_limits(SHARED_JOB.name) == {} and store.least_reached_cost(SHARED_JOB.name) == math.inf
    store.register_job(dataclasses.replace(SHARED_JOB, max_epochs=9), 2.0)  # a new job under the old name
    assert store.runs(SHARED_JOB.name) == []
    assert store.get_job(OTHER.name) == OTHER
    assert [r.state for r in store.runs(OTHER.name)] == ["reached"]
    assert store.power_limits(OTHER.name) == {8: 200.0}
