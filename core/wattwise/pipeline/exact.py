"""Exact frequency planning for small pipelines with OR-Tools CP-SAT: the yardstick of the fast solver.

For one deadline: a frequency per instruction such that the longest path is at most the deadline,
with the least iteration energy `E = sum(c_i) + P_b * S * T` (c_i = e_i - P_b * t_i, T the longest
path). Times are quantised upwards to integer units of `unit_time_s` (so a plan that meets the deadline
in units also meets it in real time) and energies are scaled to integers explicitly
(`energy_scale_per_j`). The status is reported as CP-SAT gives it: OPTIMAL only when proven.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from wattwise.errors import UsageError
from wattwise.extras import missing_extra
from wattwise.pipeline.dag import IntArray
from wattwise.pipeline.problem import PlanningProblem

try:
    from ortools.sat.python import cp_model
except ModuleNotFoundError as _err:  # CP-SAT is the `pipeline` extra's
    raise missing_extra(_err, "the exact frontier solver (--solver exact)") from None

#: Default integer scale of energies: 1 unit = 0.1 mJ.
ENERGY_SCALE_PER_J = 1e4


@dataclass(frozen=True)
class ExactResult:
    """What CP-SAT found for one deadline.

    `status` is "OPTIMAL" (proven), "FEASIBLE" (a plan, not proven optimal within the time limit),
    "INFEASIBLE" (no plan meets the deadline) or "UNKNOWN" (time ran out before any plan). With a plan,
    `time_s` and `energy_j` are its real figures from the profile and `bound_j` is CP-SAT's lower
    bound on the energy (in the quantised model). `wall_time_s` is CP-SAT's own wall time for the solve.
    """

    status: str
    deadline_s: float
    wall_time_s: float
    choice: IntArray | None = None
    time_s: float | None = None
    energy_j: float | None = None
    bound_j: float | None = None

    @property
    def has_plan(self) -> bool:
        """Whether CP-SAT found a plan (optimal or feasible) within the time limit."""
        return self.choice is not None


def solve_exact(
    problem: PlanningProblem,
    deadline_s: float,
    unit_time_s: float,
    *,
    time_limit_s: float = 10.0,
    workers: int = 2,
    energy_scale_per_j: float = ENERGY_SCALE_PER_J,
    hint: IntArray | None = None,
) -> ExactResult:
    """Least-energy plan whose quantised longest path is at most `deadline_s` (CP-SAT).

    `hint` (a choice vector, e.g. the plan of a tighter deadline) is given to CP-SAT as a starting
    solution; it changes how fast a good plan is found, never the optimum.
    """
    for name, value in (("deadline_s", deadline_s), ("unit_time_s", unit_time_s), ("time_limit_s", time_limit_s)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise UsageError(f"{name} must be a positive number of seconds (got {value!r})")
    deadline_units = math.floor(deadline_s / unit_time_s + 1e-9)
    model, choose, _ = _build_model(problem, deadline_units, unit_time_s, energy_scale_per_j)
    if hint is not None:
        for node, options in enumerate(choose):
            for opt, var in options:
                model.add_hint(var, opt == int(hint[node]))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = max(1, int(workers))
    status = solver.solve(model)
    name = solver.status_name(status)
    wall_s = solver.wall_time
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ExactResult(status=name, deadline_s=deadline_s, wall_time_s=wall_s)
    choice = np.empty(problem.dag.num_nodes, dtype=np.int64)
    for node, options in enumerate(choose):
        choice[node] = next(opt for opt, var in options if solver.boolean_value(var))
    time_s, energy_j = problem.evaluate(choice)
    return ExactResult(
        status=name,
        deadline_s=deadline_s,
        wall_time_s=wall_s,
        choice=choice,
        time_s=float(time_s),
        energy_j=float(energy_j),
        bound_j=solver.best_objective_bound / energy_scale_per_j,
    )


def _build_model(
    problem: PlanningProblem,
    deadline_units: int,
    unit_time_s: float,
    scale: float,
) -> tuple[cp_model.CpModel, list[list[tuple[int, cp_model.IntVar]]], cp_model.IntVar]:
    """One Boolean per (node, useful option), start times, longest path <= deadline, least energy."""
    dag = problem.dag
    p_b = problem.p_blocking_w
    units = np.ceil(problem.option_time_s / unit_time_s - 1e-9).astype(np.int64)
    costs = np.rint((problem.option_energy_j - p_b * problem.option_time_s) * scale).astype(np.int64)
    useful = _pareto_options(problem, units, costs)

    model = cp_model.CpModel()
    horizon = max(deadline_units, 0)
    start = [model.new_int_var(0, horizon, f"start{n}") for n in range(dag.num_nodes)]
    duration: list[cp_model.LinearExpr] = []
    choose: list[list[tuple[int, cp_model.IntVar]]] = []
    objective: list[cp_model.LinearExpr] = []
    for node in range(dag.num_nodes):
        options = useful[int(problem.node_type[node])]
        bools = [(opt, model.new_bool_var(f"x{node}_{opt}")) for opt in options]
        model.add_exactly_one(var for _, var in bools)
        duration.append(cp_model.LinearExpr.weighted_sum([v for _, v in bools], [int(units[o]) for o, _ in bools]))
        objective.append(cp_model.LinearExpr.weighted_sum([v for _, v in bools], [int(costs[o]) for o, _ in bools]))
        choose.append(bools)
    for tail, head in zip(dag.edge_tails.tolist(), dag.edge_heads.tolist(), strict=True):
        model.add(start[head] >= start[tail] + duration[tail])
    makespan = model.new_int_var(0, horizon, "makespan")
    for node in dag.sinks().tolist():
        model.add(makespan >= start[node] + duration[node])
    blocking_per_unit = round(p_b * dag.num_stages * unit_time_s * scale)
    model.minimize(sum(objective) + blocking_per_unit * makespan)
    return model, choose, makespan


def _pareto_options(problem: PlanningProblem, units: IntArray, costs: IntArray) -> list[list[int]]:
    """Per type, the options not dominated in (quantised time, effective cost): the rest never help."""
    useful: list[list[int]] = []
    for kind in range(problem.num_types):
        options = sorted(problem.type_options(kind), key=lambda o: (units[o], costs[o]))
        kept: list[int] = []
        for opt in options:
            if not kept or costs[opt] < costs[kept[-1]]:
                kept.append(opt)
        useful.append(kept)
    return useful


def quantised_range(problem: PlanningProblem, unit_time_s: float) -> tuple[int, int]:
    """Longest paths (units) of the fastest and of the slowest sensible useful options, as CP-SAT sees them."""
    units = np.ceil(problem.option_time_s / unit_time_s - 1e-9).astype(np.int64)
    costs = np.rint(
        (problem.option_energy_j - problem.p_blocking_w * problem.option_time_s) * ENERGY_SCALE_PER_J
    ).astype(np.int64)
    useful = _pareto_options(problem, units, costs)
    fastest = np.asarray([units[o[0]] for o in useful], dtype=np.float64)[problem.node_type]
    slowest = np.asarray([units[o[-1]] for o in useful], dtype=np.float64)[problem.node_type]
    dag = problem.dag
    return round(float(dag.makespan(fastest))), round(float(dag.makespan(slowest)))


def exact_frontier(
    problem: PlanningProblem,
    unit_time_s: float,
    *,
    time_limit_s: float = 10.0,
    workers: int = 2,
) -> Iterator[ExactResult]:
    """CP-SAT at every deadline from the fastest to the slowest sensible one, `unit_time_s` apart.

    Small instances only: each deadline is one CP-SAT solve (at most `time_limit_s`), hinted with the
    plan of the previous, tighter deadline.
    """
    low, high = quantised_range(problem, unit_time_s)
    hint: IntArray | None = None
    for units in range(low, high + 1):
        result = solve_exact(
            problem, units * unit_time_s, unit_time_s, time_limit_s=time_limit_s, workers=workers, hint=hint
        )
        if result.choice is not None:
            hint = result.choice
        yield result
