"""The pruning order, the line-search pruning, the bandit phase, concurrency and early stopping (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from wattwise.errors import UsageError
from wattwise.recurring.policy import (
    WATTWISE_POLICY,
    ZEUS_POLICY,
    Outcome,
    PolicyConfig,
    decide,
    exploration_step,
    stop_reason,
)
from wattwise.recurring.spec import JobSpec, Phase, StoredRun

SIZES = (8, 16, 32, 64, 128, 256)


def job(default: int = 64, **changes: object) -> JobSpec:
    fields: dict[str, object] = {
        "name": "toy",
        "batch_sizes": SIZES,
        "default_batch_size": default,
        "target_metric": 0.9,
        "max_epochs": 10,
        "max_power_w": 300.0,
    }
    fields.update(changes)
    return JobSpec(**fields)  # type: ignore[arg-type]


def explore_order(spec: JobSpec, config: PolicyConfig, result: Callable[[int], Outcome]) -> list[int]:
    """Batch sizes in the order pruning visits them when batch size b always gives `result(b)`."""
    outcomes: dict[int, list[Outcome]] = {}
    order: list[int] = []
    for _ in range(100):
        step = exploration_step(spec, config, outcomes)
        if not isinstance(step, int):
            return order
        order.append(step)
        outcomes.setdefault(step, []).append(result(step))
    raise AssertionError("pruning never finished")


def test_zeus_pruning_goes_down_from_the_default_then_up_and_stops_at_failures() -> None:
    failing = {8, 256}

    def result(b: int) -> Outcome:
        return Outcome(reached=b not in failing, cost=float(abs(b - 32) + 10), epochs=3)

    order = explore_order(job(64), ZEUS_POLICY, result)
    # Round 1: 64, 32, 16, 8 (fails: down stops), then 128, 256 (fails: up stops).
    # Round 2 over the survivors {16, 32, 64, 128}, from round 1's cheapest (32): 32, 16, then 64, 128.
    assert order == [64, 32, 16, 8, 128, 256, 32, 16, 64, 128]


def test_zeus_pruning_keeps_only_batch_sizes_that_reached_the_target() -> None:
    def result(b: int) -> Outcome:
        return Outcome(reached=b != 16, cost=float(b), epochs=3)

    outcomes = {b: [result(b)] * 2 for b in SIZES}
    assert exploration_step(job(64), ZEUS_POLICY, outcomes) == (32, 64, 128, 256)


def test_line_search_stops_a_direction_at_a_clearly_costlier_batch_size_and_skips_up() -> None:
    costs = {8: 9.0, 16: 4.0, 32: 1.0, 64: 2.0, 128: 0.5, 256: 0.4}

    def result(b: int) -> Outcome:
        return Outcome(reached=True, cost=costs[b], epochs=3)

    order = explore_order(job(64), WATTWISE_POLICY, result)
    # 32 is half of 64: clearly better, so the upward direction is skipped although 128 is cheaper
    # (the line search assumes one valley); 16 costs 4x the best, so the downward direction stops there.
    assert order == [64, 32, 16]


def test_line_search_explores_upward_when_going_down_did_not_pay() -> None:
    costs = {8: 9.0, 16: 4.0, 32: 2.5, 64: 2.0, 128: 1.5, 256: 1.2}

    def result(b: int) -> Outcome:
        return Outcome(reached=True, cost=costs[b], epochs=3)

    assert explore_order(job(64), WATTWISE_POLICY, result) == [64, 32, 16, 128, 256]


def run(
    run_id: int, batch_size: int, state: str, cost: float | None = None, epochs: int = 3, phase: Phase = "explore"
) -> StoredRun:
    return StoredRun(
        run_id=run_id,
        batch_size=batch_size,
        phase=phase,
        state=state,  # type: ignore[arg-type]
        started_at_s=float(run_id),
        updated_at_s=float(run_id),
        epochs=epochs,
        cost=cost,
    )


def test_first_run_explores_the_default_with_no_cost_limit() -> None:
    decision = decide(job(64), WATTWISE_POLICY, [], np.random.default_rng(0))
    assert (decision.batch_size, decision.phase, decision.cost_limit) == (64, "explore", math.inf)


def test_a_run_starting_while_an_exploration_run_is_open_gets_the_best_so_far() -> None:
    rng = np.random.default_rng(0)
    spec = job(64)
    history = [run(1, 64, "reached", 10.0), run(2, 32, "reached", 6.0), run(3, 16, "open")]
    concurrent = decide(spec, WATTWISE_POLICY, history, rng)
    assert (concurrent.batch_size, concurrent.phase) == (32, "concurrent")
    assert concurrent.cost_limit == pytest.approx(spec.beta * 6.0)
    # Nothing reached yet: the default is the best so far.
    assert decide(spec, WATTWISE_POLICY, [run(1, 64, "open")], rng).batch_size == 64
    # Once the exploration run finishes, exploration goes on where it was.
    history[2] = run(3, 16, "reached", 8.0)
    assert decide(spec, WATTWISE_POLICY, history, rng).phase == "explore"


def test_concurrent_runs_count_as_later_visits_of_their_batch_size() -> None:
    outcomes = {64: [Outcome(True, 10.0, 3)], 32: [Outcome(False, 5.0, 1)], 128: [Outcome(False, 5.0, 1)]}
    # Zeus's second round needs a second visit of 64, the only survivor...
    assert exploration_step(job(64), ZEUS_POLICY, outcomes) == 64
    # ...which a run started concurrently (with the best so far, 64) already gave.
    outcomes[64].append(Outcome(True, 11.0, 3))
    assert exploration_step(job(64), ZEUS_POLICY, outcomes) == (64,)


def test_bandit_exploits_the_cheapest_batch_size_and_charges_failures_their_retry() -> None:
    spec = job(64)
    history = [
        run(1, 64, "reached", 10.0, epochs=5),
        run(2, 32, "reached", 6.0, epochs=3),
        run(3, 16, "reached", 20.0, epochs=5),
        run(4, 128, "reached", 12.0, epochs=5),
        run(5, 256, "failed", 9.0, epochs=2),
    ]
    rng = np.random.default_rng(1)
    picks = [decide(spec, WATTWISE_POLICY, history, rng) for _ in range(50)]
    assert {d.phase for d in picks} == {"exploit"}
    assert {d.batch_size for d in picks} == {32}


def test_bandit_learns_that_a_batch_size_failing_half_the_time_costs_more() -> None:
    spec = job(64)
    history = [run(1, 64, "reached", 10.0, epochs=5), run(2, 32, "reached", 15.0, epochs=5)]
    history += [run(3, 16, "failed", 5.0, epochs=2), run(4, 128, "reached", 9.0, epochs=5)]
    history += [run(5, 256, "failed", 5.0, epochs=2)]
    history += [run(10 + i, 128, "failed" if i % 2 else "reached", 9.0, epochs=5, phase="exploit") for i in range(8)]
    # 128's reached runs cost 9, but every other run fails and costs 9 plus a retry at 9.
    rng = np.random.default_rng(2)
    assert {decide(spec, WATTWISE_POLICY, history, rng).batch_size for _ in range(30)} == {64}


def test_stop_reason_reached_first_then_max_epochs_then_predicted_cost() -> None:
    spec = job(64, max_epochs=5)
    common = {"last_epoch_cost": 10.0, "limit": 100.0}
    assert stop_reason(spec, epoch=5, cost=500.0, metric=0.95, **common) == "reached"
    assert stop_reason(spec, epoch=5, cost=50.0, metric=0.5, **common) == "max_epochs"
    assert stop_reason(spec, epoch=3, cost=90.0, metric=None, **common) is None
    assert stop_reason(spec, epoch=3, cost=90.5, metric=None, **common) == "cost"
    lower_is_better = job(64, metric_mode="min", target_metric=0.2)
    assert stop_reason(lower_is_better, epoch=1, cost=1.0, metric=0.19, **common) == "reached"
    assert stop_reason(lower_is_better, epoch=1, cost=1.0, metric=0.21, **common) is None


def test_cost_limit_is_beta_times_the_least_reached_cost() -> None:
    spec = job(64, beta=3.0)
    history = [run(1, 64, "reached", 10.0), run(2, 32, "reached", 7.0), run(3, 16, "failed", 1.0)]
    assert decide(spec, WATTWISE_POLICY, history, np.random.default_rng(0)).cost_limit == pytest.approx(21.0)


@pytest.mark.parametrize(
    "changes",
    [
        {"pruning_rounds": 0},
        {"prune_margin": -0.1},
        {"bandit": "ucb"},
        {"prior_weight": 0.0},
    ],
)
def test_bad_policy_settings_name_the_field(changes: dict[str, object]) -> None:
    with pytest.raises(UsageError, match=next(iter(changes))):
        PolicyConfig(**changes)  # type: ignore[arg-type]


def test_pruning_is_undone_when_the_bandit_prefers_the_batch_size_where_a_direction_stopped() -> None:
    spec = job(64)
    # Down: 64 (10), 32 (16: more than 1.5 x 10, the downward direction stops); up: 128 (12), 256 (40).
    history = [
        run(1, 64, "reached", 10.0, epochs=5),
        run(2, 32, "reached", 16.0, epochs=8),
        run(3, 128, "reached", 12.0, epochs=5),
        run(4, 256, "reached", 40.0, epochs=10),
    ]
    rng = np.random.default_rng(0)
    assert decide(spec, WATTWISE_POLICY, history, rng).phase == "exploit"
    # Later runs show that 32's first run was unlucky: it is the cheapest batch size after all.
    history += [run(5 + i, 32, "reached", 6.0, epochs=3, phase="exploit") for i in range(6)]
    resumed = decide(spec, WATTWISE_POLICY, history, rng)
    assert (resumed.batch_size, resumed.phase) == (16, "explore")
    # Without resuming, pruning is final: the bandit keeps to 32.
    final = PolicyConfig(resume_exploration=False)
    assert {decide(spec, final, history, rng).batch_size for _ in range(20)} == {32}
