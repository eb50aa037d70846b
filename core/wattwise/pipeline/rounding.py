"""From relaxed solutions to real plans: tracking and polishing, batched over many plans.

The relaxation gives each instruction a duration that may fall between two measured options. Two
passes turn it into real plans that never miss their deadline:

- `track`: in topological order, each instruction takes the cheapest option of a given set (all
  Pareto options, or only the hull vertices) that still finishes by its relaxed finish time. Each
  instruction starts no later than in the relaxation, so its budget is at least its relaxed duration:
  over all options this is never costlier than rounding every duration down on its own. Time one
  instruction saves is carried to the next one on the same path; over hull vertices only, a chain of
  instructions thus mixes a fast and a slow vertex the way the relaxation's fractional durations
  average them, instead of settling on an option above the hull.
- `polish`: alternating forward and backward passes that give each instruction the cheapest option
  fitting between its predecessors' finish and its successors' start: it spends slack that rounding
  left, never makes a plan late and never raises its effective cost.

Arrays are node-major, shape (N, B): N nodes of B plans. Inside `track` and `polish` the rows are
renumbered level after level (`LevelLayout`), so that each DAG level is a slice of rows that numpy reads
and writes in place; the lookup table of options is a small integer type, to stay in cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wattwise.pipeline.dag import FloatArray, IntArray, PipelineDag
from wattwise.pipeline.problem import PlanningProblem

#: Budgets are compared with a tolerance far below any measured time.
_EPS_S = 1e-12


#: Size of the dense lookup table of an `OptionMap`, over all types.
_TABLE_SIZE = 1 << 19


@dataclass(frozen=True)
class OptionMap:
    """Per type, a lookup "cheapest option whose time is at most x" over a chosen set of options.

    Entries are the chosen options of all types, concatenated: per type by increasing time (and
    strictly decreasing cost). A dense table over time (step `step`) gives, for a budget, an entry at
    most `steps` positions before the answer; as many vectorised checks of the next entry finish it.
    """

    times: FloatArray
    choice: IntArray
    first: IntArray
    last: IntArray
    table: IntArray
    table_first: IntArray
    table_len: IntArray
    step: float
    steps: int
    #: Per entry, the time of the next entry of the same type (infinite after a type's last entry).
    next_times: FloatArray

    @classmethod
    def build(cls, per_type: list[tuple[FloatArray, IntArray]]) -> OptionMap:
        """From per-type (times ascending, options with strictly decreasing cost)."""
        times = [np.asarray(t, dtype=np.float64) for t, _ in per_type]
        spans = [float(t[-1] - t[0]) for t in times]
        step = max(sum(spans) / _TABLE_SIZE, 1e-12)
        sizes = [int(span // step) + 1 for span in spans]
        first = np.cumsum([0] + [len(t) for t in times])[:-1]
        table = np.concatenate(
            [
                f + np.searchsorted(t, t[0] + np.arange(size) * step, side="right") - 1
                for f, t, size in zip(first, times, sizes, strict=True)
            ]
        )
        # Looking up cell k - 1 (to stay conservative under rounding), the answer lies within 2 steps.
        steps = max(int(np.max(np.searchsorted(t, t + 2 * step, side="right") - np.arange(len(t)))) for t in times)
        return cls(
            times=np.concatenate(times),
            choice=np.concatenate([o for _, o in per_type]),
            first=np.asarray(first, dtype=np.int64),
            last=np.asarray(first + np.asarray([len(t) for t in times]) - 1, dtype=np.int64),
            # A small integer type keeps the table in cache (entries: a few hundred options).
            table=np.asarray(table, dtype=np.min_scalar_type(-sum(len(t) for t in times))),
            table_first=np.asarray(np.cumsum([0, *sizes])[:-1], dtype=np.int64),
            table_len=np.asarray(sizes, dtype=np.int64),
            step=step,
            steps=steps,
            next_times=np.concatenate([np.append(t[1:], np.inf) for t in times]),
        )

    def entry(self, keys: LevelKeys, budget: FloatArray) -> IntArray:
        """Per (node, plan), the cheapest option whose time fits the budget, else the fastest.

        The result is the option's entry (position in `times` / `choice`). `keys` describe the w nodes;
        `budget` has shape (w, B).
        """
        scaled = budget - keys.base
        scaled *= 1.0 / self.step
        cell = scaled.astype(np.int64)
        cell += keys.cell_shift
        np.maximum(cell, keys.cell_low, out=cell)
        np.minimum(cell, keys.cell_high, out=cell)
        entry = self.table.take(cell)
        limit = budget + _EPS_S
        for _ in range(self.steps):
            entry += self.next_times.take(entry) <= limit
        return entry


@dataclass(frozen=True)
class LevelKeys:
    """Per node of one DAG level, the constants an `OptionMap` lookup needs, shaped (w, 1).

    The table cell of a budget is the one of `budget - base` less one, within the node's type:
    `cell_shift` = the type's first cell - 1, clipped to `cell_low`..`cell_high`.
    """

    base: FloatArray
    cell_shift: IntArray
    cell_low: IntArray
    cell_high: IntArray

    @classmethod
    def of(cls, option_map: OptionMap, node_type: IntArray) -> LevelKeys:
        """The keys of one DAG level's nodes, from the option map and each node's type."""
        table_first = option_map.table_first[node_type][:, None]
        return cls(
            base=option_map.times[option_map.first[node_type]][:, None],
            cell_shift=table_first - 1,
            cell_low=table_first,
            cell_high=table_first + (option_map.table_len[node_type] - 1)[:, None],
        )


class LevelPicker:
    """An `OptionMap` bound to a problem's DAG levels: `pick(k, budget)` for the nodes of level k."""

    def __init__(self, option_map: OptionMap, problem: PlanningProblem) -> None:
        self.map = option_map
        self.keys = [LevelKeys.of(option_map, problem.node_type[level]) for level in problem.dag.levels]
        self.layout = LevelLayout.of(problem.dag)
        #: The type of the node at each row of the layout.
        self.row_type = problem.node_type[self.layout.order]

    def pick(self, k: int, budget: FloatArray) -> tuple[IntArray, FloatArray]:
        """Options of level k's nodes that fit `budget` (w, B), and their times (map units)."""
        entry = self.map.entry(self.keys[k], budget)
        return self.map.choice.take(entry), self.map.times.take(entry)


@dataclass(frozen=True)
class LevelLayout:
    """The nodes renumbered level after level, so that each DAG level is a slice of rows (no scatter).

    Row `position[v]` holds node v; `order[p]` is the node at row p; level k is rows `bounds[k]:bounds[k + 1]`.
    Predecessor and successor lists are in rows, padded with row N (the virtual node).
    """

    order: IntArray
    position: IntArray
    bounds: tuple[int, ...]
    preds: IntArray
    succs: IntArray

    @classmethod
    def of(cls, dag: PipelineDag) -> LevelLayout:
        """The level-by-level layout of a pipeline's DAG."""
        n = dag.num_nodes
        order = np.concatenate(dag.levels)
        position = np.empty(n + 1, dtype=np.int64)
        position[order] = np.arange(n)
        position[n] = n
        bounds = tuple(int(b) for b in np.cumsum([0] + [len(level) for level in dag.levels]))
        return cls(order, position[:n], bounds, position[dag.preds[order]], position[dag.succs[order]])

    def slices(self) -> list[tuple[int, int, int]]:
        """(level, first row, end row) of every level, in topological order."""
        return [(k, a, b) for k, (a, b) in enumerate(zip(self.bounds[:-1], self.bounds[1:], strict=True))]


def _latest_of(values: FloatArray, rows: IntArray) -> FloatArray:
    """Per row of `rows` (w, k), the largest of `values[rows[:, j]]` over j: shape (w, B)."""
    out = values.take(rows[:, 0], axis=0)
    for j in range(1, rows.shape[1]):
        np.maximum(out, values.take(rows[:, j], axis=0), out=out)
    return out


def _earliest_of(values: FloatArray, rows: IntArray) -> FloatArray:
    """Per row of `rows` (w, k), the smallest of `values[rows[:, j]]` over j: shape (w, B)."""
    out = values.take(rows[:, 0], axis=0)
    for j in range(1, rows.shape[1]):
        np.minimum(out, values.take(rows[:, j], axis=0), out=out)
    return out


def track(problem: PlanningProblem, options: LevelPicker, target_finish_s: FloatArray) -> tuple[IntArray, FloatArray]:
    """In topological order, the cheapest of `options` that finishes by the target finish time.

    Returns the choices and their iteration times (the tracked plans are real plans too).
    """
    layout = options.layout
    option_map = options.map
    n, width = target_finish_s.shape
    budget = target_finish_s.take(layout.order, axis=0)  # in rows; each level's slice becomes its budget
    choice = np.empty((n, width), dtype=np.int64)
    finish = np.zeros((n + 1, width))
    for k, a, b in layout.slices():
        start = _latest_of(finish, layout.preds[a:b])
        np.subtract(budget[a:b], start, out=budget[a:b])
        entry = option_map.entry(options.keys[k], budget[a:b])
        option_map.choice.take(entry, out=choice[a:b], mode="clip")
        np.add(start, option_map.times.take(entry), out=finish[a:b])
    return choice.take(layout.position, axis=0), np.asarray(finish[:n].max(axis=0))


def polish(
    problem: PlanningProblem,
    options: LevelPicker,
    choice: IntArray,
    deadline_s: FloatArray,
) -> tuple[IntArray, FloatArray]:
    """Spend slack: a forward pass, then a backward pass (see the module docstring).

    Forward, in topological order, each node takes the cheapest option that finishes by its latest
    finish time (successors as they were). Backward, in reverse order, each takes the cheapest option
    that starts no earlier than its earliest start (predecessors as the forward pass left them).
    Returns the new choices and their iteration times: the backward pass schedules every node as late
    as the deadline allows, so the longest path is the deadline minus the earliest of those starts.
    """
    layout = options.layout
    option_map = options.map
    slices = layout.slices()
    n, width = choice.shape
    choice = choice.take(layout.order, axis=0)  # in rows, level after level
    times = problem.option_time_s.take(choice)
    latest = np.empty((n, width))  # latest finish times, as `PipelineDag.latest_finish_times_by_node`
    latest_start = np.empty((n + 1, width))
    latest_start[n] = deadline_s
    for _, a, b in reversed(slices):
        latest[a:b] = end = _earliest_of(latest_start, layout.succs[a:b])
        np.subtract(end, times[a:b], out=latest_start[a:b])
    finish = np.zeros((n + 1, width))
    for k, a, b in slices:
        start = _latest_of(finish, layout.preds[a:b])
        np.subtract(latest[a:b], start, out=latest[a:b])
        entry = option_map.entry(options.keys[k], latest[a:b])
        option_map.choice.take(entry, out=choice[a:b], mode="clip")
        option_map.times.take(entry, out=times[a:b], mode="clip")
        np.add(start, times[a:b], out=finish[a:b])
    begin = latest_start
    begin[n] = deadline_s
    for k, a, b in reversed(slices):
        end = _earliest_of(begin, layout.succs[a:b])
        entry = option_map.entry(options.keys[k], end - (finish[a:b] - times[a:b]))
        option_map.choice.take(entry, out=choice[a:b], mode="clip")
        np.subtract(end, option_map.times.take(entry), out=begin[a:b])
    return choice.take(layout.position, axis=0), np.asarray(deadline_s - begin[:n].min(axis=0))
