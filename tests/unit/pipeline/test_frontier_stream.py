"""The fast solver rounds only where the frontier changes, and the frontier is kept as it streams."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tests.support.pipeline import BLOOM_A40, GPT3_A100, problem_for, real_subset, synthetic_profile
from wattwise.pipeline.frontier import FrontierPoint, FrontierSolver, NonDominated
from wattwise.pipeline.plan import assemble_frontier
from wattwise.pipeline.problem import PlanningProblem

UNIT_S = 0.001


def compute_only(problem: PlanningProblem, points: list[FrontierPoint]) -> np.ndarray:
    """(time, sum(e - P_b * t)) of each point, one row each."""
    blocking_w = problem.p_blocking_w * problem.dag.num_stages
    return np.asarray([(p.time_s, p.energy_j - blocking_w * p.time_s) for p in points]).reshape(-1, 2)


def frontier_of(problem: PlanningProblem, stride: int) -> tuple[FrontierSolver, np.ndarray]:
    solver = FrontierSolver(problem, UNIT_S, stride=stride)
    kept = NonDominated(problem.p_blocking_w * problem.dag.num_stages)
    for point in solver.run():
        kept.add(point)
    return solver, compute_only(problem, kept.points())


def covers(frontier: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Per point, whether `frontier` (fastest first) has one no slower and no costlier (float tolerance)."""
    position = np.searchsorted(frontier[:, 0], points[:, 0] * (1 + 1e-12), side="right") - 1
    cheapest = np.minimum.accumulate(frontier[:, 1])[np.maximum(position, 0)]
    return (position >= 0) & (cheapest <= points[:, 1] + 1e-9 * np.abs(points[:, 1]))


def frontier_after_every_deadline(problem: PlanningProblem) -> np.ndarray:
    """The frontier of every point the full grid yields, filtered once at the end by `assemble_frontier`."""
    points = list(FrontierSolver(problem, UNIT_S, stride=1).run())
    frontier = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast")
    blocking_w = problem.p_blocking_w * problem.dag.num_stages
    return np.asarray([(p.time_s, p.energy_j - blocking_w * p.time_s) for p in frontier.points])


@pytest.mark.parametrize("schedule, microbatches, seed", [("1f1b", 4, 0), ("gpipe", 3, 1), ("1f1b", 8, 2)])
def test_a_small_grid_is_rounded_at_every_deadline_and_the_stream_loses_no_point(schedule, microbatches, seed):
    problem = problem_for(synthetic_profile(4, 8, UNIT_S, seed), schedule, microbatches, 80.0)
    solver, streamed = frontier_of(problem, stride=None)
    assert solver.stride == 1 and solver.rounded == solver.num_points
    full = frontier_after_every_deadline(problem)
    # The streamed frontier (window filter in the solver, `NonDominated` in the caller) is the full one,
    # less the all-maximum-frequency plan `assemble_frontier` adds when nothing beats it.
    assert covers(streamed, full[1:] if full[0, 0] < streamed[0, 0] else full).all()
    assert covers(full, streamed).all()


@pytest.mark.parametrize(
    "name, stages, frequencies, microbatches, p_blocking_w",
    [(GPT3_A100, [0, 2, 4, 6], 12, 6, 83.64), (BLOOM_A40, [1, 3, 5, 7], 12, 6, 70.38)],
)
def test_adaptive_rounding_on_real_profiles_stays_within_a_hair_of_the_full_grid(
    shared_data,
    name,
    stages,
    frequencies,
    microbatches,
    p_blocking_w,
):
    profile = real_subset(shared_data, name, stages, frequencies, UNIT_S)
    problem = problem_for(profile, "1f1b", microbatches, p_blocking_w)
    full_solver, full = frontier_of(problem, stride=1)
    solver, adaptive = frontier_of(problem, stride=16)
    assert solver.rounded < full_solver.rounded == full_solver.num_points
    # Rounding is a heuristic: a skipped deadline may hide a slightly better plan, never by more than 0.1%
    # of its compute energy here, and most full-grid points are matched exactly.
    position = np.searchsorted(adaptive[:, 0], full[:, 0] * (1 + 1e-12), side="right") - 1
    assert np.all(position >= 0)
    excess = np.minimum.accumulate(adaptive[:, 1])[position] / full[:, 1] - 1
    assert excess.max() <= 1e-3
    assert covers(adaptive, full).mean() >= 0.98


@dataclass(frozen=True)
class Point:
    time_s: float
    energy_j: float
    choice: np.ndarray


def test_streaming_keeps_exactly_the_points_assemble_frontier_keeps():
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=0), "1f1b", 2, 50.0)
    blocking_w = problem.p_blocking_w * problem.dag.num_stages
    rng = np.random.default_rng(7)
    times = rng.choice(np.linspace(0.3, 0.9, 60), 3000)  # repeated times: ties on time
    costs = rng.choice(np.linspace(100.0, 200.0, 80), 3000)  # and on cost
    choice = problem.max_frequency_choice()
    points = [Point(float(t), float(c + blocking_w * t), choice) for t, c in zip(times, costs, strict=True)]
    kept = NonDominated(blocking_w)
    for point in points:
        kept.add(point)
    streamed = kept.points()
    # Nothing held dominates another: times strictly increase and costs strictly decrease.
    held = np.asarray([(p.time_s, p.energy_j - blocking_w * p.time_s) for p in streamed])
    assert np.all(np.diff(held[:, 0]) > 0) and np.all(np.diff(held[:, 1]) < 0)
    assert len(kept) == len(streamed)
    # The same (time, energy) pairs as the batch filter of `assemble_frontier`, minus its baseline point.
    batch = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast")
    max_time = batch.max_frequency_time_s
    expected = {(p.time_s, p.energy_j) for p in batch.points if p.time_s != max_time}
    assert {(p.time_s, p.energy_j) for p in streamed if p.time_s != max_time} == expected
    # Every point of the stream is dominated by (or is) a held one.
    assert covers(held, np.asarray([(p.time_s, p.energy_j - blocking_w * p.time_s) for p in points])).all()


def test_streaming_holds_only_the_frontier_not_the_stream():
    blocking_w = 100.0
    kept: NonDominated[Point] = NonDominated(blocking_w)
    choice = np.zeros(3, dtype=np.int64)
    rng = np.random.default_rng(1)
    largest = 0
    for k in range(20_000):  # a staircase of 200 plans, each followed by 99 that it dominates
        time_s = 1.0 + (k // 100) * 0.01
        cost = 500.0 - (k // 100) + (0.0 if k % 100 == 0 else rng.uniform(0.0, 5.0))
        kept.add(Point(time_s + (k % 100) * 1e-5, cost + blocking_w * (time_s + (k % 100) * 1e-5), choice))
        largest = max(largest, len(kept))
    assert len(kept) == 200 and largest <= 201


def test_the_solver_yields_only_points_its_window_does_not_dominate():
    problem = problem_for(synthetic_profile(3, 6, UNIT_S, seed=5), "1f1b", 4, 80.0)
    solver = FrontierSolver(problem, UNIT_S)
    points = list(solver.run())
    kept = NonDominated(problem.p_blocking_w * problem.dag.num_stages)
    for point in points:
        kept.add(point)
    # Few dominated points reach the caller: most are dropped inside the solver.
    assert len(points) <= 2 * len(kept) + 8
    frontier = assemble_frontier(problem, kept.points(), unit_time_s=UNIT_S, solver="fast")
    full = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast")
    assert [(p.time_s, p.energy_j) for p in frontier.points] == [(p.time_s, p.energy_j) for p in full.points]
