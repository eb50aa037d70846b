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

Arrays are node-major, shape (N, B): N nodes of B plans, so that each DAG level is a block of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wattwise.pipeline.dag import FloatArray, IntArray
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

    @classmethod
    def build(cls, per_type: list[tuple[FloatArray, IntArray]]) -> OptionMap:
        """From per-type (times ascending, options with strictly decreasing cost)."""
        times = [np.asarray(t, dtype=np.float64) for t, _ in per_type]
        spans = [float(t[-1] - t[0]) for t in times]
        step = max(sum(spans) / _TABLE_SIZE, 1e-12)
        sizes = [int(span // step) + 1 for span in spans]
        first = np.cumsum([0] + [len(t) for t in times])[:-1]
        table = np.concatenate([
            f + np.searchsorted(t, t[0] + np.arange(size) * step, side="right") - 1
            for f, t, size in zip(first, times, sizes, strict=True)
        ])
        # Looking up cell k - 1 (to stay conservative under rounding), the answer lies within 2 steps.
        steps = max(int(np.max(np.searchsorted(t, t + 2 * step, side="right") - np.arange(len(t)))) for t in times)
        return cls(
            times=np.concatenate(times),
            choice=np.concatenate([o for _, o in per_type]),
            first=np.asarray(first, dtype=np.int64),
            last=np.asarray(first + np.asarray([len(t) for t in times]) - 1, dtype=np.int64),
            table=np.asarray(table, dtype=np.int64),
            table_first=np.asarray(np.cumsum([0, *sizes])[:-1], dtype=np.int64),
            table_len=np.asarray(sizes, dtype=np.int64),
            step=step,
            steps=steps,
        )

    def entry(self, keys: LevelKeys, budget: FloatArray) -> IntArray:
        """Per (node, plan): the entry (position in `times` / `choice`) of the cheapest option whose time
        fits the budget, else the fastest. `keys` describe the w nodes; `budget` has shape (w, B)."""
        cell = ((budget - keys.base) * (1.0 / self.step)).astype(np.int64) - 1
        entry = self.table[keys.table_first + np.minimum(np.maximum(cell, 0), keys.cell_max)]
        limit = budget + _EPS_S
        for _ in range(self.steps):
            following = np.minimum(entry + 1, keys.last)
            entry = np.where(self.times[following] <= limit, following, entry)
        return entry


@dataclass(frozen=True)
class LevelKeys:
    """Per node of one DAG level, the constants an `OptionMap` lookup needs, shaped (w, 1)."""

    base: FloatArray
    table_first: IntArray
    cell_max: IntArray
    last: IntArray

    @classmethod
    def of(cls, option_map: OptionMap, node_type: IntArray) -> LevelKeys:
        return cls(
            base=option_map.times[option_map.first[node_type]][:, None],
            table_first=option_map.table_first[node_type][:, None],
            cell_max=(option_map.table_len[node_type] - 1)[:, None],
            last=option_map.last[node_type][:, None],
        )


class LevelPicker:
    """An `OptionMap` bound to a problem's DAG levels: `pick(k, budget)` for the nodes of level k."""

    def __init__(self, option_map: OptionMap, problem: PlanningProblem) -> None:
        self.map = option_map
        self.keys = [LevelKeys.of(option_map, problem.node_type[level]) for level in problem.dag.levels]

    def pick(self, k: int, budget: FloatArray) -> tuple[IntArray, FloatArray]:
        """Options of level k's nodes that fit `budget` (w, B), and their times (map units)."""
        entry = self.map.entry(self.keys[k], budget)
        return self.map.choice[entry], self.map.times[entry]


def track(problem: PlanningProblem, options: LevelPicker, target_finish_s: FloatArray) -> IntArray:
    """In topological order, the cheapest of `options` that finishes by the target finish time."""
    dag = problem.dag
    choice = np.empty(target_finish_s.shape, dtype=np.int64)
    finish = np.zeros((dag.num_nodes + 1, target_finish_s.shape[1]))
    for k, level in enumerate(dag.levels):
        start = finish[dag.preds[level]].max(axis=1)
        choice[level], time_s = options.pick(k, target_finish_s[level] - start)
        finish[level] = start + time_s
    return choice


def polish(
    problem: PlanningProblem, options: LevelPicker, choice: IntArray, deadline_s: FloatArray,
) -> tuple[IntArray, FloatArray]:
    """Spend slack: a forward pass, then a backward pass (see the module docstring).

    Forward, in topological order, each node takes the cheapest option that finishes by its latest
    finish time (successors as they were). Backward, in reverse order, each takes the cheapest option
    that starts no earlier than its earliest start (predecessors as the forward pass left them).
    Returns the new choices and their iteration times: the backward pass schedules every node as late
    as the deadline allows, so the longest path is the deadline minus the earliest of those starts.
    """
    dag = problem.dag
    n = dag.num_nodes
    choice = choice.copy()
    times = problem.option_time_s[choice]
    latest = dag.latest_finish_times_by_node(times, deadline_s)
    finish = np.zeros((n + 1, choice.shape[1]))
    for k, level in enumerate(dag.levels):
        start = finish[dag.preds[level]].max(axis=1)
        choice[level], times[level] = options.pick(k, latest[level] - start)
        finish[level] = start + times[level]
    begin = np.empty((n + 1, choice.shape[1]))
    begin[n] = deadline_s
    for k in range(len(dag.levels) - 1, -1, -1):
        level = dag.levels[k]
        end = begin[dag.succs[level]].min(axis=1)
        choice[level], time_s = options.pick(k, end - (finish[level] - times[level]))
        begin[level] = end - time_s
    return choice, np.asarray(deadline_s - begin[:n].min(axis=0))
