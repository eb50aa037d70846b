"""`BatchSizeOptimizer`, the API a training integration uses: recommendations, remembered power limits,
early stopping, concurrent runs and stale runs, on the in-memory and the SQLite store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tests.support.clock import VirtualClock
from wattwise.errors import UsageError
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.store import JobStore, MemoryJobStore, store_url
from wattwise.store.sql import SqlJobStore

# Cost = 0.5 * E + 0.5 * 100 W * T: with E = 100 J and T = 1 s per epoch, 100 J of cost per epoch.
SPEC = JobSpec(
    name="resnet/cifar",
    batch_sizes=(32, 64, 128),
    default_batch_size=64,
    target_metric=0.9,
    max_epochs=20,
    max_power_w=100.0,
)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> JobStore:
    if request.param == "memory":
        return MemoryJobStore()
    return SqlJobStore(store_url(str(tmp_path / "jobs.sqlite")))


def optimizer(store: JobStore, clock: VirtualClock | None = None, seed: int = 0) -> BatchSizeOptimizer:
    return BatchSizeOptimizer(SPEC, store, rng=np.random.default_rng(seed), clock=clock or VirtualClock())


def train(opt: BatchSizeOptimizer, run_id: int, epochs_to_target: int | None) -> tuple[bool, int]:
    """Epochs of 100 J and 1 s until the target (at `epochs_to_target`, None: never) or a stop."""
    epoch = 0
    while True:
        epoch += 1
        reached = epochs_to_target is not None and epoch >= epochs_to_target
        if opt.should_stop(run_id, epoch, 100.0 * epoch, 1.0 * epoch, 0.95 if reached else 0.5):
            opt.report_result(run_id, energy_j=100.0 * epoch, time_s=1.0 * epoch, reached=reached)
            return reached, epoch


def test_first_run_profiles_the_default_and_later_runs_reuse_its_power_limit(store: JobStore) -> None:
    opt = optimizer(store)
    first = opt.next_batch_size()
    assert (first.batch_size, first.power_limit_w, first.phase, first.cost_limit) == (64, None, "explore", math.inf)
    opt.remember_power_limit(64, 180.0)
    assert train(opt, first.run_id, 5) == (True, 5)
    assert opt.cost_limit(store.get_run(SPEC.name, first.run_id)) == pytest.approx(2 * 500.0)
    # A run that starts while the exploration of 32 is open gets 64, with its remembered limit.
    exploring = opt.next_batch_size()
    concurrent = opt.next_batch_size()
    assert (exploring.batch_size, exploring.power_limit_w) == (32, None)
    assert (concurrent.batch_size, concurrent.power_limit_w, concurrent.phase) == (64, 180.0, "concurrent")
    assert store.get_run(SPEC.name, first.run_id).power_limit_w == 180.0


def test_a_run_stops_before_its_cost_passes_beta_times_the_least_cost_and_is_failed(store: JobStore) -> None:
    opt = optimizer(store)
    first = opt.next_batch_size()
    train(opt, first.run_id, 4)  # least cost 400: limit 800
    second = opt.next_batch_size()
    # Never reaches the target: after 8 epochs (cost 800) a ninth would pass 800, so it stops there.
    assert train(opt, second.run_id, None) == (False, 8)
    run = store.get_run(SPEC.name, second.run_id)
    assert (run.state, run.epochs, run.cost) == ("failed", 8, pytest.approx(800.0))


def test_a_run_that_never_reaches_stops_at_the_maximum_epochs(store: JobStore) -> None:
    opt = optimizer(store)
    first = opt.next_batch_size()
    assert opt.stop_reason(first.run_id, 19, 1900.0, 19.0, 0.5) is None
    assert opt.stop_reason(first.run_id, 20, 2000.0, 20.0, 0.5) == "max_epochs"


def test_a_run_with_nothing_measured_is_recorded_without_energy_and_the_policy_leaves_it_out(store: JobStore) -> None:
    opt = optimizer(store)
    first = opt.next_batch_size()
    done = opt.report_result(first.run_id, energy_j=None, time_s=3.5, reached=True, epochs=3)
    assert done is not None and (done.state, done.epochs, done.time_s) == ("reached", 3, 3.5)
    assert (done.energy_j, done.cost) == (None, None)  # unknown, not zero
    assert store.get_run(SPEC.name, first.run_id).cost is None
    # Not a free run: no cost limit comes of it, and the default batch size is explored again.
    again = opt.next_batch_size()
    assert (again.batch_size, again.phase, again.cost_limit) == (64, "explore", math.inf)
    assert train(opt, again.run_id, 4) == (True, 4)  # measured: 400 J of cost, the limit is 2 x 400
    assert opt.cost_limit(store.get_run(SPEC.name, again.run_id)) == pytest.approx(800.0)


def test_an_open_exploration_run_that_went_silent_stops_blocking_exploration(store: JobStore) -> None:
    clock = VirtualClock()
    opt = BatchSizeOptimizer(SPEC, store, rng=np.random.default_rng(0), clock=clock, stale_after_s=3600.0)
    first = opt.next_batch_size()
    train(opt, first.run_id, 3)
    crashed = opt.next_batch_size()
    assert opt.next_batch_size().phase == "concurrent"
    clock.now_s += 3601.0
    retry = opt.next_batch_size()
    assert (retry.batch_size, retry.phase) == (crashed.batch_size, "explore")


def test_two_processes_sharing_a_store_make_one_optimizer(tmp_path: Path) -> None:
    url = store_url(str(tmp_path / "jobs.sqlite"))
    machine_a = optimizer(SqlJobStore(url), seed=1)
    machine_b = optimizer(SqlJobStore(url), seed=2)
    first = machine_a.next_batch_size()
    machine_a.remember_power_limit(first.batch_size, 150.0)
    train(machine_a, first.run_id, 5)
    second = machine_b.next_batch_size()
    assert (second.batch_size, second.phase, second.cost_limit) == (32, "explore", pytest.approx(1000.0))
    assert machine_a.next_batch_size().power_limit_w == 150.0


def test_bad_calls_are_usage_errors_naming_the_field(store: JobStore) -> None:
    opt = optimizer(store)
    run = opt.next_batch_size()
    with pytest.raises(UsageError, match="batch_size 48"):
        opt.remember_power_limit(48, 150.0)
    with pytest.raises(UsageError, match="power_limit_w"):
        opt.remember_power_limit(64, -1.0)
    with pytest.raises(UsageError, match="epoch must be at least 1"):
        opt.should_stop(run.run_id, 0, 0.0, 0.0)
    with pytest.raises(UsageError, match="energy_j"):
        opt.should_stop(run.run_id, 1, float("nan"), 1.0)
    opt.should_stop(run.run_id, 2, 200.0, 2.0)
    with pytest.raises(UsageError, match="epoch must grow"):
        opt.should_stop(run.run_id, 2, 300.0, 3.0)
    with pytest.raises(UsageError, match="has no run"):
        opt.should_stop(run.run_id + 100, 1, 1.0, 1.0)
    with pytest.raises(UsageError, match="epochs must be at least 1"):
        opt.report_result(run.run_id, energy_j=1.0, time_s=1.0, reached=True, epochs=0)
    with pytest.raises(UsageError, match="stale_after_s"):
        BatchSizeOptimizer(SPEC, store, stale_after_s=0)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"default_batch_size": 48}, "default_batch_size"),
        ({"batch_sizes": ()}, "batch_sizes"),
        ({"batch_sizes": (32, 32, 64)}, "batch_sizes"),
        ({"max_epochs": 0}, "max_epochs"),
        ({"max_power_w": 0.0}, "max_power_w"),
        ({"eta": 1.5}, "eta"),
        ({"beta": 1.0}, "beta"),
        ({"metric_mode": "up"}, "metric_mode"),
        ({"name": ""}, "job: '' is not a valid name"),
        ({"target_metric": float("nan")}, "target_metric"),
    ],
)
def test_bad_job_specs_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(UsageError, match=field):
        JobSpec(**{**SPEC.__dict__, **changes})
