"""Plans a GPU can follow: each stage's instructions grouped into frequency segments it has time to reach.

A GPU does not change its SM clock at once: a change takes `clock_change_s` to act (the profile records
it per stage; `wattwise.frequency.profiler` measures it). A plan that changes the clock before every 2-6 ms
instruction asks for what the GPU cannot do: the instruction runs at the old clock, slower or dearer than
planned. `followable` turns a plan (a choice: one option per DAG node) into one the GPU can follow:

- consecutive instructions of a stage at one frequency form a segment;
- a segment shorter than `MIN_SEGMENT_CHANGES` clock changes is merged into a neighbour;
- two neighbouring segments are merged where the switch between them costs more energy than keeping them
  apart saves: a switch costs about half of `clock_change_s` at the higher of the two powers instead
  of the lower (the controller changes the clock ahead of a faster segment and at the start of a slower one, so
  that no instruction runs slower than planned);
- a merged segment runs at the higher of the two frequencies, so no instruction becomes slower and the
  plan keeps its iteration time (on a profile whose times fall with the clock); the frontier evaluates
  each followable plan afresh (`wattwise.pipeline.plan.assemble_frontier`).

Pure: it reads the planning problem's arrays and returns a new choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wattwise.pipeline.dag import IntArray
from wattwise.pipeline.problem import PlanningProblem

#: How many clock-change latencies ahead of a faster segment the controller asks for its clock: the
#: slower segment's end runs that long at the faster one's power (`wattwise.frequency.controller`).
AHEAD_CHANGES = 1.5
#: Of a latency, the share a change to a slower clock spends at the faster one's power while it settles.
SETTLING_SHARE = 0.5
#: No segment lasts less than this many clock changes: the clock must have changed before it ends.
MIN_SEGMENT_CHANGES = 1.0


@dataclass
class _Segment:
    """A run of consecutive nodes of one stage at one frequency, and how many of each instruction type."""

    nodes: list[int]
    frequency_mhz: int
    #: Instruction type (see `PlanningProblem`) -> how many of the segment's nodes are of it.
    counts: dict[int, int]
    first_kind: int
    last_kind: int

    def __add__(self, other: _Segment) -> _Segment:
        counts = dict(self.counts)
        for kind, count in other.counts.items():
            counts[kind] = counts.get(kind, 0) + count
        mhz = max(self.frequency_mhz, other.frequency_mhz)
        return _Segment(self.nodes + other.nodes, mhz, counts, self.first_kind, other.last_kind)


def followable(problem: PlanningProblem, choice: IntArray) -> IntArray:
    """`choice` with each stage's instructions merged into segments its GPU can follow (module docstring).

    Stages whose profile records no clock-change latency keep their plan as it is.
    """
    result = np.array(choice, dtype=np.int64, copy=True)
    options = _Options(problem)
    for stage in range(problem.dag.num_stages):
        latency_s = problem.profile.clock_change_of(stage)
        if latency_s > 0:
            _follow_stage(options, result, stage, latency_s)
    return result.astype(np.asarray(choice).dtype, copy=False)


def needs_following(problem: PlanningProblem) -> bool:
    """Whether any stage's profile records a clock-change latency (only then does `followable` change plans)."""
    return any(problem.profile.clock_change_of(stage) > 0 for stage in range(problem.dag.num_stages))


class _Options:
    """A problem's options looked up by (instruction type, frequency), each answer kept."""

    def __init__(self, problem: PlanningProblem) -> None:
        self.problem = problem
        self._at: dict[tuple[int, int], int] = {}

    def at(self, kind: int, frequency_mhz: int) -> int:
        """The option of type `kind` at `frequency_mhz`, or at the lowest profiled one above it."""
        key = (kind, frequency_mhz)
        found = self._at.get(key)
        if found is None:
            problem = self.problem
            options = range(int(problem.type_offsets[kind]), int(problem.type_offsets[kind + 1]))  # highest first
            found = options[0]
            for option in options:
                if problem.option_frequency_mhz[option] >= frequency_mhz:
                    found = option
            self._at[key] = found
        return found

    def cost(self, counts: dict[int, int], frequency_mhz: int) -> tuple[float, float]:
        """(time s, energy J) of `counts` instructions of each type run at `frequency_mhz`."""
        time_s = energy_j = 0.0
        for kind, count in counts.items():
            option = self.at(kind, frequency_mhz)
            time_s += count * float(self.problem.option_time_s[option])
            energy_j += count * float(self.problem.option_energy_j[option])
        return time_s, energy_j

    def power_w(self, kind: int, frequency_mhz: int) -> float:
        option = self.at(kind, frequency_mhz)
        return float(self.problem.option_energy_j[option] / self.problem.option_time_s[option])


def _switch_j(options: _Options, a: _Segment, b: _Segment, latency_s: float) -> float:
    """What the switch from segment `a` to the next, `b`, costs: part of `latency_s` at the higher power.

    To a faster clock, `AHEAD_CHANGES` latencies of `a`'s end at `b`'s power; to a slower one,
    `SETTLING_SHARE` of a latency at `a`'s.
    """
    gap_w = abs(options.power_w(a.last_kind, a.frequency_mhz) - options.power_w(b.first_kind, b.frequency_mhz))
    share = AHEAD_CHANGES if b.frequency_mhz > a.frequency_mhz else SETTLING_SHARE
    return share * latency_s * gap_w


def switching_energy_j(problem: PlanningProblem, choice: IntArray) -> float:
    """What following `choice` costs in clock switches per iteration (J): each stage's, its sequence a cycle."""
    options = _Options(problem)
    total = 0.0
    for stage in range(problem.dag.num_stages):
        latency_s = problem.profile.clock_change_of(stage)
        if latency_s <= 0:
            continue
        segments = _segments(problem, choice, stage)
        if len(segments) < 2:
            continue
        for i, segment in enumerate(segments):
            total += _switch_j(options, segment, segments[(i + 1) % len(segments)], latency_s)
    return total


def _segments(problem: PlanningProblem, choice: IntArray, stage: int) -> list[_Segment]:
    """The stage's segments in execution order, starting where one starts (the sequence is a cycle)."""
    nodes = list(problem.dag.stage_nodes(stage))
    mhz = problem.option_frequency_mhz[choice[nodes[0] : nodes[-1] + 1]].tolist()
    kinds = problem.node_type[nodes[0] : nodes[-1] + 1].tolist()
    first = next((k for k in range(len(nodes)) if mhz[k] != mhz[k - 1]), 0)  # a segment starts here
    segments: list[_Segment] = []
    for k in range(first, first + len(nodes)):
        node, freq, kind = nodes[k % len(nodes)], int(mhz[k % len(nodes)]), int(kinds[k % len(nodes)])
        last = segments[-1] if segments else None
        if last is not None and last.frequency_mhz == freq:
            last.nodes.append(node)
            last.counts[kind] = last.counts.get(kind, 0) + 1
            last.last_kind = kind
        else:
            segments.append(_Segment([node], freq, {kind: 1}, kind, kind))
    return segments


def _follow_stage(options: _Options, choice: IntArray, stage: int, latency_s: float) -> None:
    """Merge one stage's segments in place.

    The sequence is a cycle: an iteration's last instruction is followed by the next iteration's first,
    so those two segments are neighbours too. Each pair of neighbours keeps its merge's key (forced or
    not, the energy it costs); a merge recomputes only its neighbours' keys.
    """
    segments = _segments(options.problem, choice, stage)
    shortest_s = MIN_SEGMENT_CHANGES * latency_s
    never = (True, math.inf)

    def key(i: int) -> tuple[bool, float]:
        """Pair (i, i + 1)'s merge: (not forced, the energy it costs); `never` when it is not worth making."""
        count = len(segments)
        a, b = segments[i], segments[(i + 1) % count]
        time_a_s, apart_a_j = options.cost(a.counts, a.frequency_mhz)
        time_b_s, apart_b_j = options.cost(b.counts, b.frequency_mhz)
        merged = a + b
        merged_j = options.cost(merged.counts, merged.frequency_mhz)[1]
        switches_j = _switch_j(options, a, b, latency_s)
        if count == 2:  # the two are neighbours both ways round: merging saves both switches
            switches_j += _switch_j(options, b, a, latency_s)
        extra_j = merged_j - apart_a_j - apart_b_j - switches_j
        forced = min(time_a_s, time_b_s) < shortest_s
        return (not forced, extra_j) if forced or extra_j < 0 else never

    keys = [key(i) for i in range(len(segments) if len(segments) > 2 else 1)] if len(segments) > 1 else []
    while len(segments) > 1:
        i = min(range(len(keys)), key=keys.__getitem__)
        if keys[i] == never:
            break
        count = len(segments)
        j = (i + 1) % count
        merged = segments[i] + segments[j]
        if j == 0:  # the pair that wraps around: the merged segment stands last
            segments = [*segments[1:i], merged]
        else:
            segments[i : j + 1] = [merged]
        count = len(segments)
        if count <= 2 or j == 0:
            keys = [key(k) for k in range(count if count > 2 else 1)] if count > 1 else []
            continue
        del keys[j]
        keys[(i - 1) % count] = key((i - 1) % count)
        keys[i] = key(i)
    for segment in segments:
        for node in segment.nodes:
            choice[node] = options.at(int(options.problem.node_type[node]), segment.frequency_mhz)
