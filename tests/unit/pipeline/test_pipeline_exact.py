"""The CP-SAT yardstick: optimal plans on tiny pipelines, honest statuses, time limits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.errors import UsageError
from wattwise.pipeline.exact import exact_frontier, quantised_range, solve_exact

UNIT_S = 0.001


def every_plan(problem) -> list[tuple[float, float]]:
    """(time, energy) of every choice of option per node: the brute force the solver is checked against."""
    per_node = [list(problem.type_options(int(k))) for k in problem.node_type]
    return [tuple(map(float, problem.evaluate(np.asarray(combo)))) for combo in itertools.product(*per_node)]


def brute_force_j(plans: list[tuple[float, float]], deadline_s: float) -> float:
    """Least energy over the plans whose (whole-unit) longest path meets the deadline."""
    return min((energy_j for time_s, energy_j in plans if time_s <= deadline_s + 1e-9), default=np.inf)


def test_cp_sat_finds_the_brute_force_optimum():
    # 2 stages x 2 microbatches x 2 instructions = 8 nodes, 3 frequencies: 6561 plans.
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=4), "1f1b", 2, 80.0)
    low, high = quantised_range(problem, UNIT_S)
    plans = every_plan(problem)
    for units in (low, (low + high) // 2, high):
        result = solve_exact(problem, units * UNIT_S, UNIT_S, time_limit_s=30)
        assert result.status == "OPTIMAL"
        assert result.time_s is not None and result.time_s <= units * UNIT_S + 1e-9
        assert result.energy_j == pytest.approx(brute_force_j(plans, units * UNIT_S), rel=1e-9)


def test_a_deadline_below_the_fastest_plan_is_infeasible():
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=4), "1f1b", 2, 80.0)
    low, _ = quantised_range(problem, UNIT_S)
    result = solve_exact(problem, (low - 1) * UNIT_S, UNIT_S, time_limit_s=10)
    assert result.status == "INFEASIBLE" and not result.has_plan


def test_status_is_honest_and_the_time_limit_is_honoured():
    # Large enough that CP-SAT cannot prove optimality in a quarter of a second.
    problem = problem_for(synthetic_profile(4, 10, UNIT_S, seed=5), "gpipe", 6, 80.0)
    low, high = quantised_range(problem, UNIT_S)
    result = solve_exact(problem, (low + high) // 2 * UNIT_S, UNIT_S, time_limit_s=0.25)
    assert result.wall_time_s < 0.25 + 2.0
    assert result.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN")
    if result.has_plan:
        assert result.energy_j is not None and result.bound_j is not None
        gap = result.energy_j - result.bound_j
        # OPTIMAL only with the bound reached; FEASIBLE only with a gap left.
        assert (gap < 1e-3) if result.status == "OPTIMAL" else (gap > 1e-3)


def test_exact_frontier_covers_every_deadline_and_energy_never_rises_as_it_loosens():
    # 44 deadlines, 27 distinct optimal energies (units=(10, 20) gives 79 deadlines for 5 times the solving).
    problem = problem_for(synthetic_profile(2, 4, UNIT_S, seed=6, units=(6, 12)), "gpipe", 3, 80.0)
    low, high = quantised_range(problem, UNIT_S)
    results = list(exact_frontier(problem, UNIT_S, time_limit_s=10))
    assert [round(r.deadline_s / UNIT_S) for r in results] == list(range(low, high + 1))
    assert all(r.status == "OPTIMAL" and r.time_s is not None and r.time_s <= r.deadline_s + 1e-9 for r in results)
    energies = [r.energy_j for r in results]
    assert all(b <= a + 1e-6 for a, b in itertools.pairwise(energies))  # type: ignore[operator]


def test_bad_arguments_name_the_field():
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=4), "1f1b", 2, 80.0)
    with pytest.raises(UsageError, match="time_limit_s must be a positive number"):
        solve_exact(problem, 1.0, UNIT_S, time_limit_s=0)
