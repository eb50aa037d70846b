"""The time-energy frontier of a pipeline iteration (the fast solver), streamed point by point.

For deadlines from the fastest iteration time up to the slowest sensible one, `unit_time_s` apart, the
solver yields the least-energy real plans it finds that finish by them. It combines:

1. the exact convex relaxation at every deadline (`wattwise.pipeline.relaxation`: parametric min-cost flow
   with OR-Tools max-flow phases, one per breakpoint of the relaxed frontier), with times quantised to
   `unit_time_s / subdivisions` so that the relaxation follows the real times closely;
2. two roundings of a relaxed solution to measured options (tracking its finish times with any option,
   or with hull vertices only), both polished (`wattwise.pipeline.rounding`): four real plans per
   rounded deadline, the polished one of least energy telling where the frontier changes.

Rounding runs in the compiled kernels of `wattwise.pipeline.kernels` when they are built (the same plans,
to the last bit, as the numpy code of `wattwise.pipeline.rounding`, which runs otherwise).

Rounding costs far more than the relaxation, and neighbouring deadlines mostly give the same plans, so
on a large grid it is spent where the frontier changes: every `STRIDE`-th deadline first, then,
recursively, the middle of any two rounded deadlines whose best plans differ (a heuristic: on a small
grid every deadline is rounded). Plans that another plan of the same window of deadlines beats on time
and on sum(e - P_b * t) are dropped before they are yielded; `NonDominated` keeps the frontier of the
whole stream as it comes, holding only the points that no other beats.

Every point's `time_s` and `energy_j` are the plan's own figures from the profile (longest path of the
profiled times; profiled energies plus blocking energy), never an interpolation. The first deadline is
the real iteration time of the all-fastest plan, so the frontier always contains a plan with no slowdown
against it.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from wattwise.errors import UsageError
from wattwise.pipeline import kernels
from wattwise.pipeline.dag import FloatArray, IntArray
from wattwise.pipeline.plan import Timed
from wattwise.pipeline.problem import PlanningProblem, iteration_energy_j
from wattwise.pipeline.relaxation import ConvexRelaxation, RelaxedFrontier, pareto_order
from wattwise.pipeline.rounding import LevelPicker, OptionMap, polish, track

P = TypeVar("P", bound=Timed)

#: Deadlines mapped to real plans together (numpy batches), and coarse deadlines per window ...
_BATCH = 1024
#: ... fewer on large pipelines: at most this many (node, deadline) cells per batch bound the memory.
_BATCH_CELLS = 3 << 18
#: On a large grid the first pass rounds every `STRIDE`-th deadline; the others only where the best plan
#: changes. A grid of at most `FULL_GRID_CELLS` (node, deadline) cells is rounded at every deadline.
STRIDE = 16
FULL_GRID_CELLS = 50_000_000
#: Figures per rounded deadline that tell where the frontier changes (see `FrontierSolver._round`).
_KEYS = 4
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


def check_frontier_size(
    problem: PlanningProblem,
    unit_time_s: float,
    *,
    option: str = "unit_time_s",
    microbatches_option: str = "microbatches",
) -> FrontierSize:
    """`frontier_size`, or a `UsageError` naming the size, the limit and the option to change."""
    size = frontier_size(problem, unit_time_s)
    span_s = size.slowest_time_s - size.fastest_time_s
    if size.slowest_time_s / unit_time_s > MAX_TIME_UNITS:
        raise UsageError(
            f"{option} {unit_time_s:g} s is {size.slowest_time_s / unit_time_s:.3g} times shorter than "
            f"the slowest iteration ({size.slowest_time_s:.6g} s; at most {MAX_TIME_UNITS:.0e} times); "
            f"raise {option} to at least {size.slowest_time_s / MAX_TIME_UNITS:.3g} s"
        )
    if size.deadlines > MAX_DEADLINES:
        raise UsageError(
            f"{option} {unit_time_s:g} s gives {size.deadlines} deadlines between "
            f"{size.fastest_time_s:.6g} s and {size.slowest_time_s:.6g} s (at most {MAX_DEADLINES}); "
            f"raise {option} to at least {span_s / (MAX_DEADLINES - 2):.3g} s"
        )
    if size.memory_bytes > MAX_FRONTIER_BYTES:
        raise UsageError(
            f"the frontier would take about {size.memory_bytes / 2**30:.1f} GiB ({size.deadlines} "
            f"deadlines x {size.nodes} instructions; at most {MAX_FRONTIER_BYTES / 2**30:g} GiB); "
            f"raise {option} or lower {microbatches_option}"
        )
    return size


@dataclass(frozen=True, eq=False)
class FrontierPoint:
    """One point of the frontier: a real plan and its real figures from the profile.

    `deadline_s` is the iteration time the point was solved for; `time_s` (at most the deadline) and
    `energy_j` are the plan's own longest path and energy. `relaxed_energy_j` is the convex relaxation's
    least energy for an iteration of exactly the deadline (quantised times): minus the blocking term
    P_b * S * deadline_s, it bounds the plan's own sum(e_i - P_b * t_i) from below (exactly so when the
    profiled times are whole multiples of the internal resolution), which shows the rounding loss. It is
    computed when first read, for every point of the point's window at once (`wattwise frontier` never
    reads it: 0.4 s of a 10 s Bloom 8 x 96 run).
    """

    deadline_s: float
    time_s: float
    energy_j: float
    #: One global option index per DAG node (see `PlanningProblem`), in a compact integer type.
    choice: IntArray
    _relaxed: _RelaxedEnergies = field(repr=False)
    _row: int = field(repr=False)

    @property
    def relaxed_energy_j(self) -> float:
        """The relaxation's lower bound on the energy at this point's deadline (computed when first read)."""
        return self._relaxed[self._row]


class _RelaxedEnergies:
    """The relaxed energies of one window's points, one per point, by its deadline in units.

    They are computed for all of them when the first is read, each distinct deadline once, `batch` deadlines
    per call.
    """

    def __init__(self, relaxed: RelaxedFrontier, units: IntArray, batch: int) -> None:
        self._relaxed, self._units, self._batch = relaxed, units, batch

    def __getitem__(self, row: int) -> float:
        return self._values[row]

    @functools.cached_property
    def _values(self) -> list[float]:
        unique, where = np.unique(self._units, return_inverse=True)
        return np.concatenate(
            [self._relaxed.energy_j(unique[k : k + self._batch]) for k in range(0, len(unique), self._batch)]
        )[where].tolist()


class FrontierSolver:
    """Streams the frontier of a planning problem, from the fastest plan to the slowest sensible one.

    Deadlines run from the all-fastest plan's real iteration time to the slowest sensible one (every
    instruction at its option of least effective cost e - P_b * t), `unit_time_s` apart. Past the
    "knee" (the deadline of least relaxed energy) slower plans cost more energy per iteration, but they
    still matter when a straggler makes everyone wait: then only sum(e - P_b * t) counts.
    `run` solves the relaxation first, then `relaxed` and `knee_time_s` are set.
    """

    def __init__(
        self, problem: PlanningProblem, unit_time_s: float, subdivisions: int = 1000, stride: int | None = None
    ) -> None:
        if not (isinstance(unit_time_s, int | float) and math.isfinite(unit_time_s) and unit_time_s > 0):
            raise UsageError(f"unit time must be a positive number of seconds, e.g. 0.001 (got {unit_time_s!r})")
        for name, value in (("subdivisions", subdivisions), ("stride", 1 if stride is None else stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be a positive integer (got {value!r})")
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
        self._vertices = LevelPicker(
            OptionMap.build([(times[h.options], h.options) for h in self.relaxation.hulls]), problem
        )
        #: The same lookups for the compiled kernels, when they are built.
        self._compiled = (
            (kernels.CompiledPicker(self._options), kernels.CompiledPicker(self._vertices))
            if kernels.AVAILABLE
            else None
        )
        self._buffers: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: The plan of fastest real options and its real iteration time: the first deadline.
        self._fastest_choice = np.asarray([o[0] for o in per_type_real], dtype=np.int64)[problem.node_type]
        self.fastest_time_s = float(problem.evaluate(self._fastest_choice)[0])
        #: Deadline of least relaxed energy (set by `run`).
        self.knee_time_s = math.nan
        #: Deadlines of the grid rounded so far by `run`.
        self.rounded = 0
        #: Every `stride`-th deadline is rounded first (1: every deadline); by default 1 on a small grid.
        self.stride = stride or (STRIDE if self.num_points * problem.dag.num_nodes > FULL_GRID_CELLS else 1)
        self._batch = max(64, min(_BATCH, _BATCH_CELLS // problem.dag.num_nodes))

    @property
    def phases(self) -> int:
        """Max-flow phases of the relaxation (breakpoints of the relaxed frontier); 0 before `run`."""
        return self.relaxed.phases if self.relaxed else 0

    @property
    def slowest_time_s(self) -> float:
        """The last deadline: the relaxation's slowest sensible iteration time."""
        return self.relaxation.t_max * self.resolution_s

    @functools.cached_property
    def grid(self) -> IntArray:
        """The deadlines (units), ascending."""
        return _deadline_grid(self.relaxation.t_min, self.relaxation.t_max, self.subdivisions)

    @property
    def num_points(self) -> int:
        """How many deadlines the grid has (`run` rounds some of them: `rounded` counts them)."""
        return len(self.grid)

    def run(self) -> Iterator[FrontierPoint]:
        """Yield the non-dominated real plans found, window by window of deadlines, fastest deadline first.

        Every `stride`-th deadline is rounded; between two rounded deadlines whose best plans differ,
        the middle deadline is rounded too, recursively, so that rounding is spent where the frontier
        changes. Each rounded deadline offers four real plans (two tracked, two polished; the first also
        the all-fastest plan, polished); those another plan of the same window beats in time and in
        sum(e - P_b * t) are dropped.
        """
        relaxation = self.relaxation
        self.relaxed = relaxed = relaxation.solve()
        knee = int(relaxed.breakpoints[np.argmin(relaxed.energy_j(relaxed.breakpoints))])
        self.knee_time_s = knee * self.resolution_s
        grid = self.grid
        self.rounded = 0
        last = len(grid) - 1
        coarse = np.unique(np.concatenate([np.arange(0, last, self.stride), [last]]))
        previous: FloatArray | None = None
        for start in range(0, max(len(coarse) - 1, 1), self._batch):
            ends = coarse[start : start + self._batch + 1]
            points, previous = self._window(grid, ends, relaxed, previous)
            yield from points

    def _window(
        self,
        grid: IntArray,
        ends: IntArray,
        relaxed: RelaxedFrontier,
        previous: FloatArray | None,
    ) -> tuple[list[FrontierPoint], FloatArray]:
        """Round the deadlines `grid[ends]` and, where needed, those between; the window's non-dominated points.

        `previous` is the figures telling where the frontier changes (`_round`'s keys) of `ends[0]` when the
        window before rounded it; the figures of `ends[-1]` are returned for the next window.
        """
        base = int(ends[0])
        best = np.full((int(ends[-1]) - base + 1, _KEYS), np.nan)  # by deadline index - base; NaN: not rounded
        batches: list[_Candidates] = []
        todo = ends
        if previous is not None:
            best[0] = previous
            todo = ends[1:]
        lower, upper = ends[:-1], ends[1:]  # the intervals between rounded deadlines, ascending
        while len(todo):
            for chunk in range(0, len(todo), self._batch):
                indices = todo[chunk : chunk + self._batch]
                found, keys = self._round(grid[indices], relaxed)
                batches.append(found)
                if keys is not None:
                    best[indices - base] = keys
                self.rounded += len(indices)
            split = (upper - lower > 1) & np.any(best[lower - base] != best[upper - base], axis=1)
            lower, upper = lower[split], upper[split]
            todo = (lower + upper) // 2
            lower, upper = np.column_stack([lower, todo]).ravel(), np.column_stack([todo, upper]).ravel()
        return self._points(batches, relaxed), best[-1].copy()

    def _points(self, batches: list[_Candidates], relaxed: RelaxedFrontier) -> list[FrontierPoint]:
        """The window's non-dominated candidates (`batches`, emptied) as points, by deadline then time.

        Each carries its deadline's relaxed energy, computed for these only, when first read.
        """
        found = _Candidates.concatenate(batches)
        batches.clear()
        blocking_w = self.problem.p_blocking_w * self.problem.dag.num_stages
        rows = _non_dominated_order(found.time_s, found.energy_j, blocking_w)
        if not len(rows):
            return []
        kept = found.take(rows[np.lexsort((found.time_s[rows], found.deadline_s[rows]))])
        del found  # the dominated plans' memory goes before the points are built
        energies = _RelaxedEnergies(relaxed, kept.units, self._batch)
        return [
            FrontierPoint(deadline_s=d, time_s=t, energy_j=e, choice=choice, _relaxed=energies, _row=k)
            for k, (d, t, e, choice) in enumerate(
                zip(kept.deadline_s.tolist(), kept.time_s.tolist(), kept.energy_j.tolist(), kept.choice, strict=True)
            )
        ]

    def _work(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The compiled path's buffers: relaxed finish times, starting plans, polished plans.

        At least `rows` plans each, kept from batch to batch (fresh memory costs a page fault per 4 KiB on
        first touch).
        """
        nodes = self.problem.dag.num_nodes
        if self._buffers is None or len(self._buffers[1]) < rows:
            rows = max(rows, 2 * self._batch + 1)
            self._buffers = (
                np.empty((rows, nodes)),
                np.empty((rows, nodes), dtype=kernels.PLAN_DTYPE),
                np.empty((rows, nodes), dtype=kernels.PLAN_DTYPE),
            )
        return self._buffers

    def _round(
        self,
        deadlines: IntArray,
        relaxed: RelaxedFrontier,
    ) -> tuple[_Candidates, FloatArray | None]:
        """Round, polish and evaluate a batch of relaxed solutions.

        Returns the batch's non-dominated real plans on time, and (when `stride` > 1) per deadline the
        `_KEYS` figures that tell where the frontier changes (shape (deadlines, _KEYS)).
        """
        problem = self.problem
        deadline_s = np.asarray(deadlines * self.resolution_s, dtype=np.float64)
        last = deadlines == self.relaxation.t_min
        deadline_s[last] = self.fastest_time_s

        # Candidates per deadline: in topological order, each instruction takes the cheapest option (or
        # the slowest hull vertex) that finishes by its relaxed finish time; both polished; for the
        # fastest deadline also the all-fastest plan, polished. Tracked and polished plans are all real
        # plans: each is kept when on time. Plans end up plan-major, (plans, nodes).
        extra = np.flatnonzero(last)
        count = len(deadlines)
        owners = np.concatenate([np.arange(count)] * 2 + [extra])
        fastest = np.repeat(self._fastest_choice[None, :], len(extra), axis=0)
        if self._compiled is not None:
            # Into buffers kept from batch to batch: rows [0, c) rounded, [c, 2c) tracked, then the fastest.
            options, vertices = self._compiled
            work = self._work(2 * count + len(extra))
            finish_s = relaxed.finish_s(deadlines, out=work[0][:count])
            start, polished_out = work[1][: 2 * count + len(extra)], work[2][: 2 * count + len(extra)]
            totals = [kernels.Totals(problem.option_energy_j, problem.option_time_s) for _ in range(3)]
            rounded, rounded_s = kernels.track(options, finish_s, out=start[:count], totals=totals[1])
            tracked, tracked_s = kernels.track(vertices, finish_s, out=start[count : 2 * count], totals=totals[2])
            start[2 * count :] = fastest
            polished, polished_s = kernels.polish(
                options, problem.option_time_s, start, deadline_s[owners], out=polished_out, totals=totals[0]
            )
            groups = (polished, rounded, tracked)
            sums = [(t.energy_j, t.time_s) for t in totals]
        else:
            finish, _ = relaxed.node_times(deadlines)
            finish_s = np.asarray(finish * self.resolution_s, dtype=np.float64)
            rounded, rounded_s = track(problem, self._options, finish_s)
            tracked, tracked_s = track(problem, self._vertices, finish_s)
            del finish, finish_s
            start = np.concatenate([rounded, tracked, fastest.T], axis=1)
            polished, polished_s = polish(problem, self._options, start, deadline_s[owners])
            del start
            sums = [
                (_node_sum(problem.option_energy_j, group), _node_sum(problem.option_time_s, group))
                for group in (polished, rounded, tracked)
            ]
            groups = (polished.T, rounded.T, tracked.T)
        times = np.concatenate([polished_s, rounded_s, tracked_s])
        owners = np.concatenate([owners, np.arange(count), np.arange(count)])
        energies = np.concatenate(
            [
                iteration_energy_j(energy_j, time_s, group_s, problem.dag.num_stages, problem.p_blocking_w)
                for (energy_j, time_s), group_s in zip(sums, (polished_s, rounded_s, tracked_s), strict=True)
            ]
        )
        energies = np.where(times <= deadline_s[owners] * (1 + 1e-12), energies, np.inf)

        # Where the frontier changes, per deadline: the least-energy polished plan (ties: the first column)
        # and the energy of both polished plans. Not needed when every deadline is rounded.
        keys = None
        if self.stride > 1:
            polished_columns = len(polished_s)
            order = np.lexsort((energies[:polished_columns], owners[:polished_columns]))
            first = order[np.searchsorted(owners[order], np.arange(count))]
            keys = np.column_stack([times[first], energies[first], energies[:count], energies[count : 2 * count]])

        # The batch's non-dominated candidates on time, in (time, sum(e - P_b * t)).
        on_time = np.flatnonzero(np.isfinite(energies))
        order = on_time[
            _non_dominated_order(times[on_time], energies[on_time], problem.p_blocking_w * problem.dag.num_stages)
        ]
        # Compact choices (option indices are small).
        compact = np.min_scalar_type(len(problem.option_time_s))
        bounds = np.cumsum([0] + [g.shape[0] for g in groups])
        chosen = np.empty((len(order), problem.dag.num_nodes), dtype=compact)
        for g, group in enumerate(groups):
            mine = (order >= bounds[g]) & (order < bounds[g + 1])
            chosen[mine] = group[order[mine] - bounds[g]]
        found = _Candidates(deadline_s[owners[order]], deadlines[owners[order]], times[order], energies[order], chosen)
        return found, keys


@dataclass
class _Candidates:
    """Real plans found by rounding, as arrays: per plan its deadline (s and units), time, energy and plan."""

    deadline_s: FloatArray
    units: IntArray
    time_s: FloatArray
    energy_j: FloatArray
    choice: np.ndarray

    def take(self, rows: IntArray) -> _Candidates:
        return _Candidates(
            self.deadline_s[rows], self.units[rows], self.time_s[rows], self.energy_j[rows], self.choice[rows]
        )

    @staticmethod
    def concatenate(parts: list[_Candidates]) -> _Candidates:
        return _Candidates(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("deadline_s", "units", "time_s", "energy_j", "choice")
            )
        )


def _non_dominated_order(time_s: FloatArray, energy_j: FloatArray, blocking_w: float) -> IntArray:
    """Indices of the plans no other beats on both time and sum(e - P_b * t), fastest first.

    `plan.non_dominated` on arrays: by time then that sum, ties keep the first.
    """
    compute = energy_j - blocking_w * time_s
    order = np.lexsort((compute, time_s))
    if not len(order):
        return order
    compute = compute[order]
    lowest = np.minimum.accumulate(compute)
    return order[np.concatenate([[True], compute[1:] < lowest[:-1]])]


def solve_frontier(problem: PlanningProblem, unit_time_s: float, subdivisions: int = 1000) -> Iterator[FrontierPoint]:
    """Stream the frontier of `problem` (see `FrontierSolver`), fastest deadline first."""
    return FrontierSolver(problem, unit_time_s, subdivisions).run()


def _node_sum(values: np.ndarray, choice: IntArray) -> np.ndarray:
    """Per plan (column of node-major `choice`), the sum of `values` over its nodes.

    Added in node order, as the compiled `track` and `polish` add them, so both give the same energies to
    the last bit.
    """
    taken = values.take(choice)
    total = taken[0].copy()
    for row in taken[1:]:
        total += row
    return total


def _deadline_grid(t_min: int, t_max: int, step: int) -> IntArray:
    """Deadlines (units), ascending: t_min, the multiples of `step` strictly between, t_max."""
    if t_max <= t_min:
        return np.asarray([t_min], dtype=np.int64)
    inner = np.arange(t_min // step * step + step, t_max, step, dtype=np.int64)  # strictly inside
    return np.concatenate([[t_min], inner, [t_max]]).astype(np.int64)


class NonDominated(Generic[P]):
    """The points of a stream that no other is both faster-or-equal and cheaper-or-equal than, as they come.

    Cost is sum(e_i - P_b * t_i) = `energy_j - blocking_w * time_s` (`blocking_w` = P_b * stages), the
    sense of `wattwise.pipeline.plan.non_dominated` (its streaming form): only the non-dominated points are held, so
    memory follows the frontier, not the number of deadlines solved.
    """

    def __init__(self, blocking_w: float) -> None:
        self.blocking_w = blocking_w
        self._times: list[float] = []
        self._costs: list[float] = []
        self._points: list[P] = []

    def add(self, point: P) -> bool:
        """Keep `point` unless a held point dominates it; drop the held points it dominates."""
        time_s, cost = point.time_s, point.energy_j - self.blocking_w * point.time_s
        after = bisect.bisect_right(self._times, time_s)
        if after and self._costs[after - 1] <= cost:  # the cheapest held point no slower than this one
            return False
        at = end = bisect.bisect_left(self._times, time_s)
        while end < len(self._costs) and self._costs[end] >= cost:
            end += 1
        self._times[at:end] = [time_s]
        self._costs[at:end] = [cost]
        self._points[at:end] = [point]
        return True

    def __len__(self) -> int:
        return len(self._points)

    def points(self) -> list[P]:
        """The held points, fastest first (cost strictly decreasing)."""
        return list(self._points)
