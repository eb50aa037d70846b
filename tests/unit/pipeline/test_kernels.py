"""The compiled kernels give the numpy code's plans to the last bit, whatever the threads, and refuse bad input.

`wattwise.pipeline.kernels` is used when the C extension is built (an optional extension: a machine without a
C compiler gets the numpy code). Here both run on the same problems and must agree exactly: the plans, their
times, and every point of the frontier, since both do the same floating-point operations in the same order.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.support.pipeline import (
    BLOOM_A40,
    GPT3_A100,
    can_build_extensions,
    problem_for,
    real_subset,
    synthetic_profile,
)
from wattwise.errors import UsageError
from wattwise.pipeline import kernels, relaxation
from wattwise.pipeline.frontier import FrontierSolver, _node_sum
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.rounding import polish, track

UNIT_S = 0.001

built = pytest.mark.skipif(kernels._module is None, reason="the C extension is not built (no C compiler at install)")


def test_the_extension_is_built_wherever_a_c_compiler_is() -> None:
    """An install with a compiler must not fall back silently: the optional build would hide a broken file."""
    if not can_build_extensions():
        pytest.skip("no C compiler or Python headers here: the numpy code is used, as designed")
    assert kernels._module is not None


def problems() -> list[PlanningProblem]:
    return [
        problem_for(synthetic_profile(4, 8, UNIT_S, 0), "1f1b", 6, 80.0),
        problem_for(synthetic_profile(3, 5, UNIT_S, 1), "gpipe", 4, 60.0),
        problem_for(synthetic_profile(5, 12, UNIT_S, 2, units=(37.0, 81.0)), "1f1b", 9, 95.0),
    ]


def real_problems(shared_data: Path) -> list[PlanningProblem]:
    return [
        problem_for(real_subset(shared_data, GPT3_A100, [0, 3, 7], 20, UNIT_S), "1f1b", 6, 83.64),
        problem_for(real_subset(shared_data, BLOOM_A40, [0, 5, 6, 7], 30, 0.0001), "1f1b", 8, 70.38),
    ]


def relaxed_targets(solver: FrontierSolver, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Relaxed finish times (s, node-major) at `count` deadlines across the grid, and the deadlines (s)."""
    relaxed = solver.relaxation.solve()
    grid = np.unique(np.linspace(solver.relaxation.t_min, solver.relaxation.t_max, count).astype(np.int64))
    finish, _ = relaxed.node_times(grid)
    return np.asarray(finish * solver.resolution_s, dtype=np.float64), grid * solver.resolution_s


def check_same_rounding(problem: PlanningProblem, threads: int) -> None:
    solver = FrontierSolver(problem, UNIT_S)
    target, deadline_s = relaxed_targets(solver, 97)
    for picker in (solver._options, solver._vertices):
        compiled = kernels.CompiledPicker(picker)
        compiled.threads = threads
        want, want_s = track(problem, picker, target)
        got, got_s = kernels.track(compiled, target.T)
        np.testing.assert_array_equal(got, want.T)
        np.testing.assert_array_equal(got_s, want_s)
        polished, polished_s = polish(problem, solver._options, want, deadline_s)
        again, again_s = kernels.polish(
            kernels.CompiledPicker(solver._options), problem.option_time_s, want.T, deadline_s
        )
        np.testing.assert_array_equal(again, polished.T)
        np.testing.assert_array_equal(again_s, polished_s)
        # track and polish sum each output plan's option energies and times in node order, as the numpy
        # fallback does (`_node_sum`): the same bits.
        polisher = kernels.CompiledPicker(solver._options)
        polisher.threads = threads
        for kernel, args in (
            (kernels.track, (compiled, target.T)),
            (kernels.polish, (polisher, problem.option_time_s, want.T, deadline_s)),
        ):
            totals = kernels.Totals(problem.option_energy_j, problem.option_time_s)
            plans, _ = kernel(*args, totals=totals)  # type: ignore[operator]
            np.testing.assert_array_equal(totals.energy_j, _node_sum(problem.option_energy_j, plans.T))
            np.testing.assert_array_equal(totals.time_s, _node_sum(problem.option_time_s, plans.T))
        rows = problem.option_energy_j.take(polished)
        total = rows[0].copy()
        for row in rows[1:]:
            total += row
        np.testing.assert_array_equal(totals.energy_j, total)  # the polished plans, added one node at a time
        assert np.allclose(totals.time_s, problem.option_time_s.take(polished).sum(axis=0), rtol=1e-12)


@built
@pytest.mark.parametrize("threads", [1, 3])
def test_track_and_polish_pick_the_numpy_plans_exactly(threads: int) -> None:
    for problem in problems():
        check_same_rounding(problem, threads)


@built
def test_track_and_polish_pick_the_numpy_plans_exactly_on_real_profiles(shared_data: Path) -> None:
    for problem in real_problems(shared_data):
        check_same_rounding(problem, threads=2)


def frontier_points(problem: PlanningProblem, unit_s: float, stride: int | None) -> list[tuple]:
    solver = FrontierSolver(problem, unit_s, stride=stride)
    return [(p.deadline_s, p.time_s, p.energy_j, p.relaxed_energy_j, p.choice.tolist()) for p in solver.run()]


@built
@pytest.mark.parametrize("stride", [None, 4])
def test_the_frontier_is_the_same_with_and_without_the_kernels(
    monkeypatch: pytest.MonkeyPatch, stride: int | None
) -> None:
    """Every point, its plan, its figures and its relaxed energy: the full grid and the adaptive one."""
    for problem in problems():
        fast = frontier_points(problem, UNIT_S, stride)
        monkeypatch.setattr(kernels, "AVAILABLE", False)
        slow = frontier_points(problem, UNIT_S, stride)
        monkeypatch.setattr(kernels, "AVAILABLE", True)
        assert fast == slow and len(fast) > 5


@built
def test_dijkstra_finds_scipys_distances() -> None:
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import dijkstra

    rng = np.random.default_rng(7)
    for nodes, arcs in [(2, 1), (30, 80), (400, 2000)]:
        tails, heads = rng.integers(0, nodes, arcs), rng.integers(0, nodes, arcs)
        # Integer weights as in the relaxation: zeros (tight arcs) and infinities (absent arcs) included.
        weights = rng.integers(0, 5, arcs).astype(np.float64)
        weights[rng.random(arcs) < 0.2] = np.inf
        order = np.lexsort((heads, tails))
        indptr = np.searchsorted(tails[order], np.arange(nodes + 1))
        graph = csr_array((weights[order], heads[order], indptr), shape=(nodes, nodes))
        want = dijkstra(graph, directed=True, indices=0)
        got = kernels.dijkstra(indptr, heads[order], weights[order], 0)
        np.testing.assert_array_equal(got, want)


@built
def test_the_relaxation_is_the_same_with_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    for problem in problems():
        fast = relaxation.ConvexRelaxation(problem, UNIT_S / 100).solve().potentials
        monkeypatch.setattr(kernels, "AVAILABLE", False)
        slow = relaxation.ConvexRelaxation(problem, UNIT_S / 100).solve().potentials
        monkeypatch.setattr(kernels, "AVAILABLE", True)
        np.testing.assert_array_equal(fast, slow)


@built
def test_bad_arrays_are_refused_not_read_out_of_bounds() -> None:
    problem = problems()[0]
    solver = FrontierSolver(problem, UNIT_S)
    compiled = kernels.CompiledPicker(solver._options)
    target, deadline_s = relaxed_targets(solver, 5)
    with pytest.raises(ValueError, match="target"):
        kernels.track(compiled, target.T[:, :-1])
    choice, _ = kernels.track(compiled, target.T)
    bad = choice.copy()
    bad[0, 0] = len(problem.option_time_s)  # no such option
    with pytest.raises(ValueError, match="option out of range"):
        kernels.polish(compiled, problem.option_time_s, bad, deadline_s)
    with pytest.raises(ValueError, match="output buffer"):
        kernels.track(compiled, target.T, out=np.empty((1, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="output buffer"):  # plans are int32: a wider buffer is refused
        kernels.track(compiled, target.T, out=np.empty(choice.shape, dtype=np.int64))
    relaxed = solver.relaxation.solve()
    phase = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="column out of range"):
        kernels.node_durations(
            relaxed.potentials, phase, phase, phase, solver.relaxation.hi, np.asarray([problem.dag.num_nodes])
        )
    # Sums over tables too short for the options the picker can choose.
    short = kernels.Totals(problem.option_energy_j[:1], problem.option_time_s[:1])
    with pytest.raises(ValueError, match="option out of range"):
        kernels.track(compiled, target.T, totals=short)
    with pytest.raises(ValueError, match="option out of range"):
        kernels.polish(compiled, problem.option_time_s, choice, deadline_s, totals=short)
    with pytest.raises(ValueError, match="arc head out of range"):
        kernels.dijkstra(np.asarray([0, 1, 1]), np.asarray([5]), np.asarray([1.0]), 0)
    with pytest.raises(ValueError, match="negative"):
        kernels.dijkstra(np.asarray([0, 1, 1]), np.asarray([1]), np.asarray([-1.0]), 0)


def test_threads_follow_the_affinity_and_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATTWISE_THREADS", raising=False)
    assert kernels.threads() == min(len(os.sched_getaffinity(0)), 64)
    monkeypatch.setenv("WATTWISE_THREADS", "1")
    assert kernels.threads() == 1
    for bad in ("zero", "0", "-2"):
        monkeypatch.setenv("WATTWISE_THREADS", bad)
        with pytest.raises(UsageError, match="WATTWISE_THREADS must be a positive integer"):
            kernels.threads()
