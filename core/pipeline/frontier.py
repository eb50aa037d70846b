"""The time-energy frontier of a pipeline iteration (the fast solver), streamed point by point.

For every deadline from the fastest iteration time up to the slowest sensible one, `unit_time_s`
apart, the solver yields the least-energy real plan it finds that finishes by the deadline. It
combines:

1. the exact convex relaxation at every deadline (`wattwise.pipeline.relaxation`: parametric min-cost flow
   with OR-Tools max-flow phases, one per breakpoint of the relaxed frontier), with times quantised to
   `unit_time_s / subdivisions` so that the relaxation follows the real times closely;
2. two roundings of each relaxed solution to measured options (tracking its finish times with any
   option, or with hull vertices only), both polished (`wattwise.pipeline.rounding`), keeping the one of
   least real energy.

Every point's `time_s` and `energy_j` are the plan's own figures from the profile (longest path of the
profiled times; profiled energies plus blocking energy), never an interpolation. The first point is
solved for the real iteration time of the all-fastest plan, so the frontier always contains a plan with
no slowdown against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from wattwise.errors import UsageError
from wattwise.pipeline.dag import IntArray
from wattwise.pipeline.problem import PlanningProblem, iteration_energy_j
from wattwise.pipeline.relaxation import ConvexRelaxation, RelaxedFrontier, pareto_order
from wattwise.pipeline.rounding import LevelPicker, OptionMap, polish, track

#: Deadlines mapped to real plans together (numpy batches).
_BATCH = 1024
#: Int64 arrays of shape (nodes, batch) alive at once while a batch is mapped to real plans (an estimate).
_WORK_ARRAYS = 12
#: Most deadlines of one frontier.
MAX_DEADLINES = 1_000_000
#: Most `unit_time_s` in the slowest sensible iteration: times are integers of `unit_time_s / subdivisions`.
MAX_TIME_UNITS = 100_000_000
#: Most memory (bytes) the points of one frontier and a batch's working arrays may take.
MAX_FRONTIER_BYTES = 8 * 2**30


@dataclass(frozen=True)
class FrontierSize:
    """How large a frontier would be, estimated before any of it is built."""

    nodes: int
    fastest_time_s: float
    slowest_time_s: float
    deadlines: int
    memory_bytes: int


def frontier_size(problem: PlanningProblem, unit_time_s: float) -> FrontierSize:
    """Estimate the frontier of `problem` at `unit_time_s`: one longest path for each end, nothing more.

    The slowest sensible plan runs every instruction at its option of least e - P_b * t (as the solver's
    last deadline); the points are kept in memory, one compact option index per node each.
    """
    kinds = range(problem.num_types)
    costs = problem.option_energy_j - problem.p_blocking_w * problem.option_time_s
    times = problem.option_time_s
    fastest = np.asarray([times[problem.type_options(k)].min() for k in kinds])
    slowest = np.asarray([min(problem.type_options(k), key=lambda o: (costs[o], times[o])) for k in kinds])
    fastest_s = float(problem.dag.makespan(fastest[problem.node_type]))
    slowest_s = max(fastest_s, float(problem.dag.makespan(times[slowest][problem.node_type])))
    deadlines = math.floor((slowest_s - fastest_s) / unit_time_s) + 2
    nodes = problem.dag.num_nodes
    itemsize = np.min_scalar_type(len(times)).itemsize
    memory = deadlines * nodes * itemsize + min(deadlines, _BATCH) * nodes * 8 * _WORK_ARRAYS
    return FrontierSize(nodes, fastest_s, slowest_s, deadlines, memory)


def check_frontier_size(problem: PlanningProblem, unit_time_s: float, *, option: str = "unit_time_s",
                        microbatches_option: str = "microbatches") -> FrontierSize:
    """`frontier_size`, or a `UsageError` naming the size, the limit and the option to change."""
    size = frontier_size(problem, unit_time_s)
    span_s = size.slowest_time_s - size.fastest_time_s
    if size.slowest_time_s / unit_time_s > MAX_TIME_UNITS:
        raise UsageError(f"{option} {unit_time_s:g} s is {size.slowest_time_s / unit_time_s:.3g} times shorter than "
                         f"the slowest iteration ({size.slowest_time_s:.6g} s; at most {MAX_TIME_UNITS:.0e} times); "
                         f"raise {option} to at least {size.slowest_time_s / MAX_TIME_UNITS:.3g} s")
    if size.deadlines > MAX_DEADLINES:
        raise UsageError(f"{option} {unit_time_s:g} s gives {size.deadlines} deadlines between "
                         f"{size.fastest_time_s:.6g} s and {size.slowest_time_s:.6g} s (at most {MAX_DEADLINES}); "
                         f"raise {option} to at least {span_s / (MAX_DEADLINES - 2):.3g} s")
    if size.memory_bytes > MAX_FRONTIER_BYTES:
        raise UsageError(f"the frontier would take about {size.memory_bytes / 2**30:.1f} GiB ({size.deadlines} "
                         f"deadlines x {size.nodes} instructions; at most {MAX_FRONTIER_BYTES / 2**30:g} GiB); "
                         f"raise {option} or lower {microbatches_option}")
    return size


@dataclass(frozen=True, eq=False)
class FrontierPoint:
    """One point of the frontier: a real plan and its real figures from the profile.

    `deadline_s` is the iteration time the point was solved for; `time_s` (at most the deadline) and
    `energy_j` are the plan's own longest path and energy. `relaxed_energy_j` is the convex relaxation's
    least energy for an iteration of exactly the deadline (quantised times): minus the blocking term
    P_b * S * deadline_s, it bounds the plan's own sum(e_i - P_b * t_i) from below (exactly so when the
    profiled times are whole multiples of the internal resolution), which shows the rounding loss.
    """

    deadline_s: float
    time_s: float
    energy_j: float
    relaxed_energy_j: float
    #: One global option index per DAG node (see `PlanningProblem`), in a compact integer type.
    choice: IntArray


class FrontierSolver:
    """Streams the frontier of a planning problem, from the fastest plan to the slowest sensible one.

    Deadlines run from the all-fastest plan's real iteration time to the slowest sensible one (every
    instruction at its option of least effective cost e - P_b * t), `unit_time_s` apart. Past the
    "knee" (the deadline of least relaxed energy) slower plans cost more energy per iteration, but they
    still matter when a straggler makes everyone wait: then only sum(e - P_b * t) counts.
    `run` solves the relaxation first, then `relaxed` and `knee_time_s` are set.
    """

    def __init__(self, problem: PlanningProblem, unit_time_s: float, subdivisions: int = 1000) -> None:
        if not (isinstance(unit_time_s, int | float) and math.isfinite(unit_time_s) and unit_time_s > 0):
            raise UsageError(f"unit time must be a positive number of seconds, e.g. 0.001 (got {unit_time_s!r})")
        if isinstance(subdivisions, bool) or not isinstance(subdivisions, int) or subdivisions < 1:
            raise UsageError(f"subdivisions must be a positive integer (got {subdivisions!r})")
        check_frontier_size(problem, unit_time_s)
        self.problem = problem
        self.unit_time_s = float(unit_time_s)
        self.subdivisions = subdivisions
        self.resolution_s = self.unit_time_s / subdivisions
        self.relaxation = ConvexRelaxation(problem, self.resolution_s)
        self.relaxed: RelaxedFrontier | None = None

        costs = self.relaxation.costs_j
        times = problem.option_time_s
        per_type_real = [pareto_order(problem, k, times, costs) for k in range(problem.num_types)]
        self._options = LevelPicker(OptionMap.build([(times[o], o) for o in per_type_real]), problem)
        self._vertices = LevelPicker(OptionMap.build([(times[h.options], h.options) for h in self.relaxation.hulls]),
                                     problem)
        #: The plan of fastest real options and its real iteration time: the first deadline.
        self._fastest_choice = np.asarray([o[0] for o in per_type_real], dtype=np.int64)[problem.node_type]
        self.fastest_time_s = float(problem.evaluate(self._fastest_choice)[0])
        #: Deadline of least relaxed energy (set by `run`).
        self.knee_time_s = math.nan

    @property
    def phases(self) -> int:
        """Max-flow phases of the relaxation (breakpoints of the relaxed frontier); 0 before `run`."""
        return self.relaxed.phases if self.relaxed else 0

    @property
    def slowest_time_s(self) -> float:
        """The last deadline: the relaxation's slowest sensible iteration time."""
        return self.relaxation.t_max * self.resolution_s

    @property
    def num_points(self) -> int:
        """How many deadlines `run` solves (at most one point each)."""
        t_min, t_max, step = self.relaxation.t_min, self.relaxation.t_max, self.subdivisions
        return len(_deadline_grid(t_min, t_max, step))

    def run(self) -> Iterator[FrontierPoint]:
        """Yield one point per deadline, fastest first."""
        relaxation = self.relaxation
        self.relaxed = relaxed = relaxation.solve()
        knee = int(relaxed.breakpoints[np.argmin(relaxed.energy_j(relaxed.breakpoints))])
        self.knee_time_s = knee * self.resolution_s
        grid = _deadline_grid(relaxation.t_min, relaxation.t_max, self.subdivisions)
        for start in range(0, len(grid), _BATCH):
            yield from self._points(grid[start : start + _BATCH], relaxed)

    def _points(self, deadlines: IntArray, relaxed: RelaxedFrontier) -> Iterator[FrontierPoint]:
        """Round, polish and evaluate a batch of relaxed solutions; keep the best real plan of each."""
        problem = self.problem
        n = problem.dag.num_nodes
        inn = 2 + 2 * np.arange(n)
        events = relaxed.events(deadlines)
        durations = relaxed.durations(events)
        deadline_s = np.asarray(deadlines * self.resolution_s, dtype=np.float64)
        last = deadlines == self.relaxation.t_min
        deadline_s[last] = self.fastest_time_s

        # Candidates per deadline: in topological order, each instruction takes the cheapest option (or
        # the slowest hull vertex) that finishes by its relaxed finish time; for the fastest deadline
        # also the all-fastest plan. All polished, all checked against the deadline.
        finish_s = np.asarray(events[inn + 1] * self.resolution_s, dtype=np.float64)
        rounded = track(problem, self._options, finish_s)
        tracked = track(problem, self._vertices, finish_s)
        extra = np.flatnonzero(last)
        fastest = np.repeat(self._fastest_choice[:, None], len(extra), axis=1)
        candidates = np.concatenate([rounded, tracked, fastest], axis=1)
        owners = np.concatenate([np.arange(len(deadlines))] * 2 + [extra])
        candidates, times = polish(problem, self._options, candidates, deadline_s[owners])
        energies = iteration_energy_j(
            problem.option_energy_j[candidates].sum(axis=0), problem.option_time_s[candidates].sum(axis=0),
            times, problem.dag.num_stages, problem.p_blocking_w,
        )
        energies = np.where(times <= deadline_s[owners] * (1 + 1e-12), energies, np.inf)

        # Best candidate per deadline: any option (column k) or vertices (column B + k), or an extra.
        count = len(deadlines)
        best = np.where(energies[count : 2 * count] < energies[:count], np.arange(count) + count, np.arange(count))
        for column, owner in zip(range(2 * count, len(owners)), extra, strict=True):
            if energies[column] < energies[best[owner]]:
                best[owner] = column
        relaxed_j = self.relaxation.relaxed_cost_j(durations.T) + (
            problem.p_blocking_w * problem.dag.num_stages * deadlines * self.resolution_s
        )
        # Compact choices (option indices are small): Bloom 8 x 96 yields 133k points of 1536 nodes.
        compact = np.min_scalar_type(len(problem.option_time_s))
        chosen = np.ascontiguousarray(candidates[:, best].T.astype(compact))
        for k in range(count):
            column = best[k]
            if math.isfinite(energies[column]):
                yield FrontierPoint(
                    deadline_s=float(deadline_s[k]),
                    time_s=float(times[column]),
                    energy_j=float(energies[column]),
                    relaxed_energy_j=float(relaxed_j[k]),
                    choice=chosen[k],
                )


def solve_frontier(problem: PlanningProblem, unit_time_s: float, subdivisions: int = 1000) -> Iterator[FrontierPoint]:
    """Stream the frontier of `problem` (see `FrontierSolver`), fastest deadline first."""
    return FrontierSolver(problem, unit_time_s, subdivisions).run()


def _deadline_grid(t_min: int, t_max: int, step: int) -> IntArray:
    """Deadlines (units), ascending: t_min, the multiples of `step` strictly between, t_max."""
    inner = np.arange(t_min // step * step + step, t_max, step, dtype=np.int64)
    return np.unique(np.concatenate([[t_min], inner, [t_max]]).astype(np.int64))


def pareto_filter(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """Points no other point beats on both time and energy, fastest first."""
    kept: list[FrontierPoint] = []
    for point in sorted(points, key=lambda p: (p.time_s, p.energy_j)):
        if not kept or point.energy_j < kept[-1].energy_j:
            kept.append(point)
    return kept

