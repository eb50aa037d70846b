"""The convex relaxation of frequency planning, solved for every deadline by parametric min-cost flow.

Problem. Each instruction i picks a frequency, i.e. a measured (t_i, e_i). With the iteration time T (the
longest path), one iteration costs `E = sum(e_i) + P_b * (S * T - sum(t_i))`. Write c_i = e_i - P_b * t_i
(what an instruction adds beyond the blocking power its GPU would burn anyway): then
`E = sum(c_i) + P_b * S * T`, and for a deadline T the task is the project time-cost trade-off: least
`sum(c_i)` such that every path of the DAG takes at most T.

Relaxation. Per instruction, the lower convex hull of its (t, c) points, from the fastest option to the
one of least c (slower is never sensible). With convex piecewise-linear costs the time-cost problem is a
linear program whose dual is a min-cost flow (Fulkerson 1961): instruction i becomes parallel arcs, one
per hull vertex, whose "profit" is the vertex's duration and whose capacity is the change of slope there;
precedence edges are free arcs of unbounded capacity. The least relaxed cost C(T) is the conjugate of the
max-profit flow curve P(v): `C(T) = max_v P(v) - v * T`.

Algorithm (primal-dual, successive longest paths). Start from zero flow and the longest-path potentials
D of the all-slowest plan (D(sink) is the slowest sensible iteration time). Each phase

1. sends a maximum flow through the arcs that are tight for D (OR-Tools `SimpleMaxFlow`);
2. recomputes D as the longest distances in the residual network (Dijkstra on reduced costs: the compiled
   kernel of `wattwise.pipeline.kernels`, else scipy's);
   the new D(sink) is the next breakpoint of C(T), strictly smaller.

Between two breakpoints the flow stays optimal and both potential vectors are feasible for it; feasible
potentials are closed under minimum and shifts, so for every integer T in [D_new(sink), D_old(sink)] the
event times `min(D_old, D_new + T - D_new(sink))` are an optimal integral solution at T. One max-flow per
breakpoint (a few hundred on the Perseus profiles), not per time step. It ends when D(sink) reaches the
all-fastest iteration time.

Per instruction the flow fills hull segments in order (higher profit first), so the state is one number,
the instruction's total flow; the residual network has two arcs per instruction and per edge.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wattwise.extras import missing_extra, require
from wattwise.pipeline import kernels
from wattwise.pipeline.dag import FloatArray, IntArray
from wattwise.pipeline.problem import PlanningProblem

try:
    from ortools.graph.python import max_flow
except ModuleNotFoundError as _err:  # the solver is the `pipeline` extra's
    raise missing_extra(_err, "the pipeline frontier solver") from None

#: Capacity of arcs without a bound (the fastest hull segment, precedence edges); leaves room in int64.
_INF = 1 << 50
#: Slopes (W) become integer capacities in milliwatts.
_CAPACITY_PER_W = 1000.0
#: Per-type key offset for vectorised searches over concatenated per-type arrays.
_TYPE_KEY = 1 << 52
_SOURCE, _SINK = 0, 1


@dataclass(frozen=True)
class Hull:
    """Lower convex hull of one (stage, instruction)'s options in (quantised time, effective cost)."""

    #: Global option indices of the vertices, fastest first; their quantised times and costs (J).
    options: IntArray
    time_units: IntArray
    cost_j: FloatArray
    #: Flow segments of the dual, slowest vertex first: profit (duration) and cumulative capacity.
    seg_profit: IntArray
    seg_cum_cap: IntArray


def option_costs_j(problem: PlanningProblem) -> FloatArray:
    """Effective cost of every option: e - P_b * t (J)."""
    return np.asarray(problem.option_energy_j - problem.p_blocking_w * problem.option_time_s)


def quantise(time_s: FloatArray, resolution_s: float) -> IntArray:
    """Times in integer units, rounded up (a plan on time in units is on time in seconds)."""
    return np.ceil(np.asarray(time_s) / resolution_s - 1e-9).astype(np.int64)


def pareto_order(problem: PlanningProblem, kind: int, times: FloatArray | IntArray, costs: FloatArray) -> IntArray:
    """Options of one type that no faster-or-equal option beats on cost, by increasing time."""
    options = np.asarray(problem.type_options(kind))
    order = options[np.lexsort((costs[options], times[options]))]
    order = order[np.minimum.accumulate(costs[order]) == costs[order]]
    return order[np.concatenate([[True], np.diff(costs[order]) < 0])]


def build_hull(problem: PlanningProblem, kind: int, units: IntArray, costs: FloatArray, resolution_s: float) -> Hull:
    """Hull and dual flow segments of one type."""
    best = pareto_order(problem, kind, units, costs)
    vertices = best[_lower_hull(units[best], costs[best])]
    vt, vc = units[vertices], costs[vertices]
    # Slopes (W) are negative and increasing; their magnitudes in mW are non-increasing.
    slopes_w = np.diff(vc) / (np.diff(vt) * resolution_s)
    magnitude = np.rint(-slopes_w * _CAPACITY_PER_W).astype(np.int64)
    # Concave profit curve of the dual: duration vt[K] for flow up to magnitude[K-1], then vt[K-1] up to
    # magnitude[K-2], ..., vt[0] beyond. Segments whose capacity rounds to zero are dropped.
    cum = np.append(magnitude[::-1], _INF)
    profits = vt[::-1]
    kept = np.diff(np.concatenate([[0], cum])) > 0
    return Hull(vertices, vt, vc, profits[kept], cum[kept])


def _lower_hull(t: IntArray, c: FloatArray) -> IntArray:
    """Indices of the lower convex hull of points with strictly increasing t and decreasing c."""
    keep: list[int] = []
    for k in range(len(t)):
        while len(keep) >= 2:
            a, b = keep[-2], keep[-1]
            # Drop b when it lies on or above the segment from a to k.
            if (c[b] - c[a]) * (t[k] - t[a]) >= (c[k] - c[a]) * (t[b] - t[a]):
                keep.pop()
            else:
                break
        keep.append(k)
    return np.asarray(keep, dtype=np.int64)


class ConvexRelaxation:
    """The relaxation of one problem at one time resolution: hulls, time range, and `solve`."""

    def __init__(self, problem: PlanningProblem, resolution_s: float) -> None:
        self.problem = problem
        self.resolution_s = resolution_s
        self.units = quantise(problem.option_time_s, resolution_s)
        self.costs_j = option_costs_j(problem)
        self.hulls = [build_hull(problem, k, self.units, self.costs_j, resolution_s) for k in range(problem.num_types)]
        node_type = problem.node_type
        #: Per node, the fastest and slowest sensible durations (units).
        self.lo = np.asarray([h.seg_profit[-1] for h in self.hulls], dtype=np.int64)[node_type]
        self.hi = np.asarray([h.seg_profit[0] for h in self.hulls], dtype=np.int64)[node_type]
        dag = problem.dag
        #: Relaxed range of iteration times (units): all fastest, all slowest sensible.
        self.t_min = round(float(dag.makespan(self.lo.astype(np.float64))))
        self.t_max = round(float(dag.makespan(self.hi.astype(np.float64))))

    @functools.cached_property
    def type_groups(self) -> tuple[IntArray, IntArray]:
        """The nodes grouped by type (node order within a type), and where each type's group starts."""
        node_type = self.problem.node_type
        by_type = np.argsort(node_type, kind="stable")
        return by_type, np.searchsorted(node_type[by_type], np.arange(len(self.hulls) + 1))

    def relaxed_cost_j(self, durations: IntArray) -> FloatArray:
        """Sum over nodes of the hull-interpolated effective cost, per row of `durations` (B, N).

        Per type (in type order), the sum over its nodes in node order: the columns are gathered once,
        grouped by type, instead of one boolean selection per type.
        """
        by_type, bounds = self.type_groups
        grouped = np.asarray(durations)[:, by_type]
        return self.relaxed_cost_by_type_j(lambda kind: grouped[:, bounds[kind] : bounds[kind + 1]], len(grouped))

    def relaxed_cost_by_type_j(self, durations_of: Callable[[int], np.ndarray], plans: int) -> FloatArray:
        """`relaxed_cost_j` from each type's durations.

        `durations_of(kind)` has shape (plans, nodes of the type in node order); per type in type order, the
        sum over its nodes of the hull-interpolated cost.
        """
        _, bounds = self.type_groups
        total = np.zeros(plans)
        for kind, hull in enumerate(self.hulls):
            if bounds[kind + 1] > bounds[kind]:
                total += np.interp(durations_of(kind), hull.time_units, hull.cost_j).sum(axis=1)
        return total

    def solve(self) -> RelaxedFrontier:
        """Run the primal-dual phases down to the fastest iteration time; keep every breakpoint."""
        problem = self.problem
        dag = problem.dag
        n = dag.num_nodes
        node_type = problem.node_type
        inn = 2 + 2 * np.arange(n)
        out = inn + 1

        # Precedence arcs: DAG edges out(u) -> in(v), source -> first instructions, last -> sink.
        sources, sinks = dag.sources(), dag.sinks()
        p_tail = np.concatenate([out[dag.edge_tails], np.full(len(sources), _SOURCE), out[sinks]])
        p_head = np.concatenate([inn[dag.edge_heads], inn[sources], np.full(len(sinks), _SINK)])
        p_flow = np.zeros(len(p_tail), dtype=np.int64)

        # Segments of all types, concatenated; keys `type * 2^52 + cum` are sorted globally.
        first_seg = np.cumsum([0] + [len(h.seg_profit) for h in self.hulls])[node_type]
        flat_profit = np.concatenate([h.seg_profit for h in self.hulls])
        flat_cum = np.concatenate([h.seg_cum_cap for h in self.hulls])
        cum_keys = np.concatenate([k * _TYPE_KEY + h.seg_cum_cap for k, h in enumerate(self.hulls)])
        type_key = node_type * _TYPE_KEY
        act_flow = np.zeros(n, dtype=np.int64)

        # Potentials = longest distances from the source; start from the all-slowest plan.
        finish = np.rint(dag.finish_times(self.hi.astype(np.float64))).astype(np.int64)
        pot = np.zeros(2 * n + 2, dtype=np.int64)
        pot[out] = finish
        pot[inn] = finish - self.hi
        pot[_SINK] = self.t_max
        breakpoints = [pot]

        # The residual network of every phase on one fixed set of arcs (CSR, sorted by tail): forward
        # and backward arcs of every instruction and precedence edge, an absent backward arc (no flow to
        # cancel) weighing infinity. Only the weights change from phase to phase.
        arc_tails = np.concatenate([inn, out, p_tail, p_head])
        arc_heads = np.concatenate([out, inn, p_head, p_tail])
        arc_order = np.lexsort((arc_heads, arc_tails))
        paths = _ShortestPaths(np.searchsorted(arc_tails[arc_order], np.arange(2 * n + 3)), arc_heads[arc_order])

        while pot[_SINK] > self.t_min:
            # Residual arcs of each instruction: forward through its first unsaturated segment,
            # backward through its last segment carrying flow.
            fwd_seg = np.searchsorted(cum_keys, type_key + act_flow, side="right")
            bwd_seg = np.searchsorted(cum_keys, type_key + act_flow, side="left")
            has_bwd = act_flow > 0
            fwd_profit, bwd_profit = flat_profit[fwd_seg], flat_profit[bwd_seg]
            fwd_cap = flat_cum[fwd_seg] - act_flow
            bwd_cap = act_flow - np.where(bwd_seg > first_seg, flat_cum[np.maximum(bwd_seg - 1, 0)], 0)

            # 1. Maximum flow through the arcs that are tight for the current potentials.
            span = pot[out] - pot[inn]
            p_slack = pot[p_head] - pot[p_tail]
            a_fwd = np.flatnonzero(span == fwd_profit)
            a_bwd = np.flatnonzero(has_bwd & (span == bwd_profit))
            q_fwd = np.flatnonzero(p_slack == 0)
            q_bwd = np.flatnonzero((p_flow > 0) & (p_slack == 0))
            flows = _max_flow(
                np.concatenate([inn[a_fwd], out[a_bwd], p_tail[q_fwd], p_head[q_bwd]]),
                np.concatenate([out[a_fwd], inn[a_bwd], p_head[q_fwd], p_tail[q_bwd]]),
                np.concatenate([fwd_cap[a_fwd], bwd_cap[a_bwd], np.full(len(q_fwd), _INF), p_flow[q_bwd]]),
            )
            cuts = np.cumsum([len(a_fwd), len(a_bwd), len(q_fwd)])
            act_flow[a_fwd] += flows[: cuts[0]]  # each index once per statement
            act_flow[a_bwd] -= flows[cuts[0] : cuts[1]]
            p_flow[q_fwd] += flows[cuts[1] : cuts[2]]
            p_flow[q_bwd] -= flows[cuts[2] :]

            # 2. Longest distances in the new residual network: Dijkstra on reduced costs (all >= 0).
            fwd_profit = flat_profit[np.searchsorted(cum_keys, type_key + act_flow, side="right")]
            bwd_profit = flat_profit[np.searchsorted(cum_keys, type_key + act_flow, side="left")]
            weights = np.concatenate(
                [
                    span - fwd_profit,
                    np.where(act_flow > 0, bwd_profit - span, np.inf),
                    p_slack,
                    np.where(p_flow > 0, -p_slack, np.inf),
                ]
            )
            pot = pot - np.rint(paths.from_source(weights[arc_order])).astype(np.int64)
            breakpoints.append(pot)
        return RelaxedFrontier(self, np.stack(breakpoints))


class RelaxedFrontier:
    """Optimal relaxed event times at every deadline, from the breakpoints of the primal-dual run.

    `potentials[j]` are the longest distances after j phases; their sink entries decrease strictly
    from the slowest to the fastest iteration time. Between consecutive breakpoints j and j + 1,
    `min(potentials[j], potentials[j + 1] + T - T_{j+1})` is optimal at T.
    """

    def __init__(self, relaxation: ConvexRelaxation, potentials: IntArray) -> None:
        self.relaxation = relaxation
        self.potentials = potentials
        #: Breakpoint iteration times (units), ascending, and the index of each in `potentials`.
        self._times = potentials[::-1, _SINK].copy()
        n = relaxation.problem.dag.num_nodes
        inn = 2 + 2 * np.arange(n)
        #: Node-major copies of the start and finish event potentials (N, phases + 1), for `node_times`.
        self._starts = np.ascontiguousarray(potentials[:, inn].T)
        self._finishes = np.ascontiguousarray(potentials[:, inn + 1].T)

    @property
    def phases(self) -> int:
        """Number of phases the flow algorithm ran (one breakpoint of the relaxed frontier each)."""
        return int(self.potentials.shape[0] - 1)

    @property
    def breakpoints(self) -> IntArray:
        """Iteration times (units) at which the relaxed frontier bends, ascending."""
        return self._times

    def events(self, deadlines: IntArray) -> IntArray:
        """Relaxed event times for each deadline (units), node-major: shape (2N + 2, B)."""
        slower, faster, shift = self._phases(deadlines)
        return np.minimum(self.potentials[slower], self.potentials[faster] + shift[:, None]).T

    def node_times(self, deadlines: IntArray) -> tuple[IntArray, IntArray]:
        """Per node and deadline, the relaxed finish time and duration (units), node-major (N, B).

        The same figures as `events` and `durations`, without the other event times.
        """
        slower, faster, shift = self._phases(deadlines)
        finish = np.minimum(self._finishes.take(slower, axis=1), self._finishes.take(faster, axis=1) + shift)
        start = np.minimum(self._starts.take(slower, axis=1), self._starts.take(faster, axis=1) + shift)
        return finish, np.minimum(finish - start, self.relaxation.hi[:, None])

    def finish_s(self, deadlines: IntArray, out: FloatArray | None = None) -> FloatArray:
        """Per deadline and node, the relaxed finish time in seconds, plan-major (B, N), into `out` if given.

        `node_times`'s finish times times the resolution, by the compiled kernel (the numpy path of the solver
        uses `node_times`).
        """
        relaxation = self.relaxation
        slower, faster, shift = self._phases(deadlines)
        return kernels.node_finish_s(
            self.potentials, relaxation.problem.dag.num_nodes, slower, faster, shift, relaxation.resolution_s, out=out
        )

    def _phases(self, deadlines: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Per deadline, the two breakpoints' rows of `potentials` around it and its shift past the faster."""
        deadlines = np.clip(np.asarray(deadlines, dtype=np.int64), self._times[0], self._times[-1])
        count = len(self._times)
        # Ascending position of the breakpoint at or below each deadline -> phase index j + 1.
        below = np.searchsorted(self._times, deadlines, side="right") - 1
        faster = count - 1 - below  # index of the breakpoint at or below (the later phase)
        slower = np.maximum(faster - 1, 0)
        return slower, faster, deadlines - self._times[below]

    def durations(self, events: IntArray) -> IntArray:
        """Per node, relaxed duration (units) from node-major event times, capped at the slowest sensible."""
        n = self.relaxation.problem.dag.num_nodes
        inn = 2 + 2 * np.arange(n)
        return np.minimum(events[inn + 1] - events[inn], self.relaxation.hi[:, None])

    def energy_j(self, deadlines: IntArray) -> FloatArray:
        """Relaxed least energy at each deadline: hull costs plus P_b * S * T."""
        relaxation = self.relaxation
        problem = relaxation.problem
        if kernels.AVAILABLE:
            # Each type's durations straight from the kernel, contiguous and in float64, as interp wants them.
            slower, faster, shift = self._phases(deadlines)
            by_type, bounds = relaxation.type_groups

            def durations_of(kind: int) -> FloatArray:
                return kernels.node_durations(
                    self.potentials, slower, faster, shift, relaxation.hi, by_type[bounds[kind] : bounds[kind + 1]]
                )

            cost_j = relaxation.relaxed_cost_by_type_j(durations_of, len(slower))
        else:
            cost_j = relaxation.relaxed_cost_j(self.durations(self.events(deadlines)).T)
        return np.asarray(cost_j + problem.p_blocking_w * problem.dag.num_stages * deadlines * relaxation.resolution_s)


class _ShortestPaths:
    """Dijkstra from the source over one fixed CSR set of arcs whose weights change from call to call.

    The compiled kernel when built; else scipy's, imported only then (its sparse graph package pulls in
    scipy.sparse.linalg: about a third of a small frontier's run time).
    """

    def __init__(self, indptr: IntArray, indices: IntArray) -> None:
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(indices, dtype=np.int64)
        self._graph = None
        if not kernels.AVAILABLE:
            csr_array = require("scipy.sparse", "the pipeline frontier solver without its compiled kernels").csr_array
            nodes = len(indptr) - 1
            self._graph = csr_array((np.zeros(len(indices)), self.indices, self.indptr), shape=(nodes, nodes))

    def from_source(self, weights: FloatArray) -> FloatArray:
        """Shortest distances from the source; an infinite weight is no arc."""
        if self._graph is None:
            return kernels.dijkstra(self.indptr, self.indices, weights, _SOURCE)
        from scipy.sparse.csgraph import dijkstra

        self._graph.data[:] = weights
        return np.asarray(dijkstra(self._graph, directed=True, indices=_SOURCE))


def _max_flow(tails: IntArray, heads: IntArray, caps: IntArray) -> IntArray:
    """Per-arc flows of a maximum source-sink flow (OR-Tools push-relabel)."""
    if len(tails) == 0:
        return np.zeros(0, dtype=np.int64)
    solver = max_flow.SimpleMaxFlow()
    arcs = solver.add_arcs_with_capacity(tails, heads, caps)
    status = solver.solve(_SOURCE, _SINK)
    if status != solver.OPTIMAL:
        raise RuntimeError(f"OR-Tools max flow failed with status {status}")
    if solver.optimal_flow() >= _INF:
        raise RuntimeError("unbounded flow above the fastest iteration time: inconsistent potentials")
    return np.asarray(solver.flows(arcs), dtype=np.int64)
