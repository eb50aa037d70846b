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
    """A run of consecutive nodes of one stage at one frequency."""

    nodes: list[int]
    frequency_mhz: int


def followable(problem: PlanningProblem, choice: IntArray) -> IntArray:
    """`choice` with each stage's instructions merged into segments its GPU can follow (module docstring).

    Stages whose profile records no clock-change latency keep their plan as it is.
    """
    result = np.array(choice, dtype=np.int64, copy=True)
    for stage in range(problem.dag.num_stages):
        latency_s = problem.profile.clock_change_of(stage)
        if latency_s > 0:
            _follow_stage(problem, result, stage, latency_s)
    return result.astype(np.asarray(choice).dtype, copy=False)


def needs_following(problem: PlanningProblem) -> bool:
    """Whether any stage's profile records a clock-change latency (only then does `followable` change plans)."""
    return any(problem.profile.clock_change_of(stage) > 0 for stage in range(problem.dag.num_stages))


def _option_at(problem: PlanningProblem, node: int, frequency_mhz: int) -> int:
    """The option of `node`'s type at `frequency_mhz`, or at the lowest profiled one above it."""
    kind = int(problem.node_type[node])
    options = range(int(problem.type_offsets[kind]), int(problem.type_offsets[kind + 1]))  # highest first
    best = options[0]
    for option in options:
        if problem.option_frequency_mhz[option] >= frequency_mhz:
            best = option
    return best


def _cost(problem: PlanningProblem, nodes: list[int], frequency_mhz: int) -> tuple[float, float]:
    """(time s, energy J) of `nodes` run at `frequency_mhz`."""
    options = [_option_at(problem, node, frequency_mhz) for node in nodes]
    return float(problem.option_time_s[options].sum()), float(problem.option_energy_j[options].sum())


def _switch_j(problem: PlanningProblem, a: _Segment, b: _Segment, latency_s: float) -> float:
    """What the switch from segment `a` to the next, `b`, costs: part of `latency_s` at the higher power.

    To a faster clock, `AHEAD_CHANGES` latencies of `a`'s end at `b`'s power; to a slower one,
    `SETTLING_SHARE` of a latency at `a`'s.
    """
    powers = []
    for segment, node in ((a, a.nodes[-1]), (b, b.nodes[0])):
        option = _option_at(problem, node, segment.frequency_mhz)
        powers.append(float(problem.option_energy_j[option] / problem.option_time_s[option]))
    share = AHEAD_CHANGES if b.frequency_mhz > a.frequency_mhz else SETTLING_SHARE
    return share * latency_s * abs(powers[0] - powers[1])


def switching_energy_j(problem: PlanningProblem, choice: IntArray) -> float:
    """What following `choice` costs in clock switches per iteration (J): each stage's, its sequence a cycle."""
    total = 0.0
    for stage in range(problem.dag.num_stages):
        latency_s = problem.profile.clock_change_of(stage)
        segments = _segments(problem, choice, stage)
        if latency_s <= 0 or len(segments) < 2:
            continue
        for i, segment in enumerate(segments):
            total += _switch_j(problem, segment, segments[(i + 1) % len(segments)], latency_s)
    return total


def _segments(problem: PlanningProblem, choice: IntArray, stage: int) -> list[_Segment]:
    """The stage's segments in execution order, starting where one starts (the sequence is a cycle)."""
    nodes = list(problem.dag.stage_nodes(stage))
    mhz = [int(problem.option_frequency_mhz[choice[node]]) for node in nodes]
    if len(set(mhz)) == 1:
        return [_Segment(nodes, mhz[0])]
    first = next(k for k in range(len(nodes)) if mhz[k] != mhz[k - 1])
    segments: list[_Segment] = []
    for k in range(first, first + len(nodes)):
        node, freq = nodes[k % len(nodes)], mhz[k % len(nodes)]
        if segments and segments[-1].frequency_mhz == freq:
            segments[-1].nodes.append(node)
        else:
            segments.append(_Segment([node], freq))
    return segments


def _merged(problem: PlanningProblem, a: _Segment, b: _Segment) -> tuple[int, float]:
    """(frequency, energy J) of `a` and `b` run as one segment: at the higher of their frequencies."""
    mhz = max(a.frequency_mhz, b.frequency_mhz)
    return mhz, _cost(problem, a.nodes + b.nodes, mhz)[1]


def _follow_stage(problem: PlanningProblem, choice: IntArray, stage: int, latency_s: float) -> None:
    """Merge one stage's segments in place.

    The sequence is a cycle: an iteration's last instruction is followed by the next iteration's first,
    so those two segments are neighbours too.
    """
    segments = _segments(problem, choice, stage)
    shortest_s = MIN_SEGMENT_CHANGES * latency_s
    while len(segments) > 1:
        count = len(segments)
        best: tuple[bool, float, int, int] | None = None  # (not forced, energy it costs, left index, MHz)
        for i in range(count if count > 2 else 1):
            a, b = segments[i], segments[(i + 1) % count]
            time_a_s, apart_a_j = _cost(problem, a.nodes, a.frequency_mhz)
            time_b_s, apart_b_j = _cost(problem, b.nodes, b.frequency_mhz)
            merged_mhz, merged_j = _merged(problem, a, b)
            switches_j = _switch_j(problem, a, b, latency_s)
            if count == 2:  # the two are neighbours both ways round: merging saves both switches
                switches_j += _switch_j(problem, b, a, latency_s)
            extra_j = merged_j - apart_a_j - apart_b_j - switches_j
            forced = min(time_a_s, time_b_s) < shortest_s
            key = (not forced, extra_j, i, merged_mhz)
            if (forced or extra_j < 0) and (best is None or key < best):
                best = key
        if best is None:
            break
        i, merged_mhz = best[2], best[3]
        j = (i + 1) % count
        merged = _Segment(segments[i].nodes + segments[j].nodes, merged_mhz)
        if j == 0:  # the pair that wraps around: the merged segment stands last
            segments = [*segments[1:i], merged]
        else:
            segments[i : j + 1] = [merged]
    for segment in segments:
        for node in segment.nodes:
            choice[node] = _option_at(problem, node, segment.frequency_mhz)
