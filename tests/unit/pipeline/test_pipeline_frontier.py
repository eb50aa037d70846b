"""The fast frontier solver: the energy formula, the relaxation against an LP, CP-SAT as the yardstick."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from tests.support.pipeline import BLOOM_A40, GPT3_A100, problem_for, real_subset, synthetic_profile
from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.exact import quantised_range, solve_exact
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.problem import PlanningProblem, iteration_energy_j
from wattwise.pipeline.profiles import FrequencyOption, PipelineProfile
from wattwise.pipeline.relaxation import ConvexRelaxation, RelaxedFrontier

UNIT_S = 0.001


def test_energy_counts_blocked_gpus():
    # GPipe, 2 stages, 1 microbatch: a chain F(0) -> F(1) -> B(1) -> B(0) of 1 + 2 + 3 + 4 s.
    def options(time_s: float, energy_j: float) -> tuple[FrequencyOption, ...]:
        return (FrequencyOption(1000, time_s, energy_j), FrequencyOption(500, 2 * time_s, energy_j))

    profile = PipelineProfile(
        {
            (0, "forward"): options(1.0, 10.0),
            (1, "forward"): options(2.0, 20.0),
            (1, "backward"): options(3.0, 30.0),
            (0, "backward"): options(4.0, 40.0),
        }
    )
    problem = PlanningProblem.build(profile, pipeline_dag("gpipe", 2, 1), p_blocking_w=5.0)
    time_s, energy_j = problem.evaluate(problem.max_frequency_choice())
    # Each GPU is powered 10 s and busy 5 s: 100 J of work + 2 GPUs x 5 s x 5 W blocked.
    assert float(time_s) == 10.0
    assert float(energy_j) == 100.0 + 5.0 * (2 * 10.0 - 10.0) == 150.0
    assert iteration_energy_j(100.0, 10.0, 10.0, 2, 5.0) == 150.0


def relaxation_lp(relaxation: ConvexRelaxation, deadline: int) -> float:
    """The convex relaxation at `deadline` as an LP (scipy HiGHS): starts, durations, epigraph costs."""
    problem = relaxation.problem
    dag = problem.dag
    n = dag.num_nodes
    # Variables: start[0:n], duration[n:2n], cost[2n:3n].
    rows, rhs = [], []
    for tail, head in zip(dag.edge_tails.tolist(), dag.edge_heads.tolist(), strict=True):
        row = np.zeros(3 * n)
        row[tail], row[n + tail], row[head] = 1, 1, -1  # start_t + dur_t - start_h <= 0
        rows.append(row)
        rhs.append(0.0)
    for node in range(n):
        row = np.zeros(3 * n)
        row[node], row[n + node] = 1, 1  # finish <= deadline
        rows.append(row)
        rhs.append(deadline)
        hull = relaxation.hulls[int(problem.node_type[node])]
        for k in range(len(hull.time_units) - 1):
            slope = (hull.cost_j[k + 1] - hull.cost_j[k]) / (hull.time_units[k + 1] - hull.time_units[k])
            row = np.zeros(3 * n)
            row[n + node], row[2 * n + node] = slope, -1  # cost >= c_k + slope (d - t_k)
            rows.append(row)
            rhs.append(slope * hull.time_units[k] - hull.cost_j[k])
        if len(hull.time_units) == 1:
            row = np.zeros(3 * n)
            row[2 * n + node] = -1
            rows.append(row)
            rhs.append(-hull.cost_j[0])
    duration_bounds = list(zip(relaxation.lo.tolist(), relaxation.hi.tolist(), strict=True))
    bounds = [(0, None)] * n + duration_bounds + [(None, None)] * n
    objective = np.concatenate([np.zeros(2 * n), np.ones(n)])
    result = linprog(objective, A_ub=np.asarray(rows), b_ub=np.asarray(rhs), bounds=bounds, method="highs")
    assert result.status == 0
    return float(result.fun)


@pytest.mark.parametrize("schedule, microbatches, seed", [("1f1b", 4, 0), ("gpipe", 3, 1), ("1f1b", 6, 2)])
def test_the_relaxation_is_exact_at_every_deadline(schedule, microbatches, seed):
    problem = problem_for(synthetic_profile(3, 6, UNIT_S, seed), schedule, microbatches, 80.0)
    relaxation = ConvexRelaxation(problem, UNIT_S)
    relaxed = relaxation.solve()
    deadlines = np.unique(np.linspace(relaxation.t_min, relaxation.t_max, 7).round().astype(np.int64))
    events = relaxed.events(deadlines)
    durations = relaxed.durations(events)
    ours = relaxation.relaxed_cost_j(durations.T)
    dag = problem.dag
    for k, deadline in enumerate(deadlines):
        # Feasible: every instruction within its range, every path within the deadline ...
        assert np.all(durations[:, k] >= relaxation.lo) and np.all(durations[:, k] <= relaxation.hi)
        assert float(dag.makespan(durations[:, k].astype(float))) <= deadline
        # ... and as cheap as the LP optimum.
        assert ours[k] == pytest.approx(relaxation_lp(relaxation, int(deadline)), rel=1e-6, abs=1e-6)


def fast_against_exact(problem: PlanningProblem, deadlines: int = 5) -> list[float]:
    """Relative excess of the fast solver's energy over CP-SAT's proven optimum, per deadline tried."""
    points = list(FrontierSolver(problem, UNIT_S).run())
    times = np.asarray([p.time_s for p in points])
    energies = np.asarray([p.energy_j for p in points])
    low, high = quantised_range(problem, UNIT_S)
    excess = []
    for units in np.unique(np.linspace(low, high, deadlines).round().astype(int)):
        exact = solve_exact(problem, units * UNIT_S, UNIT_S, time_limit_s=60)
        assert exact.status == "OPTIMAL" and exact.energy_j is not None
        fast_j = energies[times <= units * UNIT_S + 1e-9].min()
        excess.append(fast_j / exact.energy_j - 1.0)
    return excess


def test_fast_solver_is_within_one_percent_of_cp_sat_on_a_synthetic_pipeline():
    excess = fast_against_exact(problem_for(synthetic_profile(4, 5, UNIT_S, seed=0), "1f1b", 4, 80.0))
    assert max(excess) <= 0.01
    assert min(excess) >= -1e-6  # never better than a proven optimum


@pytest.mark.parametrize(
    "name, stages, frequencies, schedule, microbatches, p_blocking_w",
    [
        (GPT3_A100, [0, 3, 5, 7], 5, "1f1b", 4, 83.64),
        (GPT3_A100, [0, 1, 2, 3], 8, "gpipe", 5, 83.64),
        (BLOOM_A40, [4, 5, 6, 7], 6, "1f1b", 5, 70.38),
        (BLOOM_A40, [1, 2, 4, 6], 10, "gpipe", 6, 70.38),
    ],
)
def test_fast_solver_is_within_one_percent_of_cp_sat_on_real_profiles(
    shared_data,
    name,
    stages,
    frequencies,
    schedule,
    microbatches,
    p_blocking_w,
):
    profile = real_subset(shared_data, name, stages, frequencies, UNIT_S)
    excess = fast_against_exact(problem_for(profile, schedule, microbatches, p_blocking_w))
    assert max(excess) <= 0.01
    assert min(excess) >= -1e-6


def test_every_point_is_a_real_plan_on_time():
    problem = problem_for(synthetic_profile(4, 8, UNIT_S, seed=3), "1f1b", 6, 80.0)
    solver = FrontierSolver(problem, UNIT_S)
    points = list(solver.run())
    assert points and solver.rounded == solver.num_points  # a small grid: every deadline rounded
    assert [p.deadline_s for p in points] == sorted(p.deadline_s for p in points)  # fastest first
    choices = np.stack([p.choice for p in points])
    time_s, energy_j = problem.evaluate(choices)
    assert np.allclose(time_s, [p.time_s for p in points], rtol=1e-12, atol=0)
    assert np.allclose(energy_j, [p.energy_j for p in points], rtol=1e-12, atol=0)
    assert all(p.time_s <= p.deadline_s + 1e-12 for p in points)
    # With times in whole units, the relaxation bounds the compute energy sum(e - P_b t) of every plan.
    blocking_w = problem.p_blocking_w * problem.dag.num_stages
    for p in points:
        assert p.relaxed_energy_j - blocking_w * p.deadline_s <= (p.energy_j - blocking_w * p.time_s) + 1e-6
    max_time, max_energy = problem.evaluate(problem.max_frequency_choice())
    assert points[0].time_s <= float(max_time) and points[0].energy_j < float(max_energy)


def test_relaxed_energies_are_computed_only_when_read(monkeypatch: pytest.MonkeyPatch):
    # `wattwise frontier` never reads them; a reader gets each point's deadline's relaxed energy.
    problem = problem_for(synthetic_profile(4, 8, UNIT_S, seed=3), "1f1b", 6, 80.0)
    calls: list[int] = []
    original = RelaxedFrontier.energy_j

    def counted(self: RelaxedFrontier, deadlines: np.ndarray) -> np.ndarray:
        calls.append(len(deadlines))
        return original(self, deadlines)

    monkeypatch.setattr(RelaxedFrontier, "energy_j", counted)
    solver = FrontierSolver(problem, UNIT_S)
    points = list(solver.run())
    solve_calls = len(calls)  # the knee: the relaxed energies of the breakpoints
    assert solve_calls == 1
    read = [p.relaxed_energy_j for p in points]
    # Each point's deadline in units (the first deadline, t_min, is solved at the fastest plan's real time).
    units = np.asarray(
        [
            solver.relaxation.t_min
            if p.deadline_s == solver.fastest_time_s
            else round(p.deadline_s / solver.resolution_s)
            for p in points
        ]
    )
    assert sum(calls[solve_calls:]) == len(set(units.tolist()))  # each distinct deadline once
    assert read == original(solver.relaxed, units).tolist()


def test_unit_time_must_be_positive():
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=0), "1f1b", 2, 80.0)
    with pytest.raises(ValueError, match="unit time must be a positive number"):
        FrontierSolver(problem, 0.0)


def test_gpt3_frontier_saves_at_least_what_perseus_reports(shared_data):
    """lowtime 0.3.0 on GPT-3 175B / A100, 8 x 12: 15.36% at 0.11% slowdown; 26.2% with a straggler at 1.2x."""
    from wattwise.pipeline.plan import assemble_frontier, choose_for_straggler, choose_intrinsic
    from wattwise.pipeline.profiles import load_profile

    problem = PlanningProblem.build(load_profile(shared_data / GPT3_A100), pipeline_dag("1f1b", 8, 12), 83.64)
    points = list(FrontierSolver(problem, UNIT_S).run())
    frontier = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast", plans="all")
    intrinsic = choose_intrinsic(frontier)
    assert intrinsic.slowdown <= 0.0
    assert intrinsic.saving >= 0.1536
    straggler = choose_for_straggler(frontier, 1.2 * frontier.max_frequency_time_s)
    assert straggler.saving >= 0.262
