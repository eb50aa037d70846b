"""Frequency plans and frontiers as data, and how to choose a point (pure).

A plan is, per stage, the ordered `Step`s `(instruction, microbatch, frequency_mhz)` that the stage runs
in one iteration: exactly what a controller (`wattwise.frequency`) walks, instruction by instruction,
locking the SM clock before each one. A frontier is a list of points `(time_s, energy_j, plan)` with
the facts needed to choose among them; its `PlanMatrix` holds every point's plan compactly (one small
integer per instruction), so the choice is among all points, not only those that spell their plan out.

Choosing:

- **intrinsic** (no straggler): least energy among plans no slower than running every instruction at
  the maximum frequency;
- **straggler** at T': every GPU waits until T' anyway, so a plan of time T <= T' costs
  `E + P_b * S * (T' - T)`; the least of that among plans with T <= T'.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from wattwise.codec import is_whole
from wattwise.errors import UsageError
from wattwise.pipeline.dag import IntArray
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.schedule import INSTRUCTIONS, SCHEDULES, Step, build_schedule
from wattwise.pipeline.segments import followable, needs_following, switching_energy_j
from wattwise.vocabulary import PlanMode

#: Relative tolerance when comparing an iteration time with the all-maximum-frequency one (float noise).
TIME_TOLERANCE = 1e-9
#: Plans converted to frequency indices per numpy call in `PlanMatrix.of_choices`.
_ROWS_AT_ONCE = 1024


#: Per stage, its steps in execution order, each with its `frequency_mhz`.
Plan = tuple[tuple[Step, ...], ...]


def plan_from_choice(
    problem: PlanningProblem, choice: IntArray, steps: dict[tuple[int, int], Step] | None = None
) -> Plan:
    """The plan of a choice vector (one global option per DAG node).

    `steps` (node, frequency) -> planned step, if given, is filled and reused: plans of one problem share
    their steps (they are immutable), and a frontier's plans mostly agree.
    """
    dag = problem.dag
    frequencies = problem.option_frequency_mhz[np.asarray(choice)].tolist()  # Python ints, read one by one
    made = {} if steps is None else steps
    plan = []
    for stage in range(dag.num_stages):
        row = []
        for node, step in zip(dag.stage_nodes(stage), dag.steps[stage], strict=True):
            key = (node, frequencies[node])
            planned = made.get(key)
            if planned is None:
                planned = made[key] = step.at(key[1])
            row.append(planned)
        plan.append(tuple(row))
    return tuple(plan)


def choice_from_plan(problem: PlanningProblem, plan: Plan) -> IntArray:
    """The choice vector of a plan; the plan must follow the problem's schedule and profiled frequencies."""
    dag = problem.dag
    if len(plan) != dag.num_stages:
        raise UsageError(f"the plan has {len(plan)} stages but the pipeline has {dag.num_stages}")
    frequencies = np.empty(dag.num_nodes, dtype=np.int64)
    for stage, steps in enumerate(plan):
        expected = dag.steps[stage]
        if len(steps) != len(expected):
            raise UsageError(f"stage {stage} of the plan has {len(steps)} steps; the schedule has {len(expected)}")
        for node, step, want in zip(dag.stage_nodes(stage), steps, expected, strict=True):
            if (step.instruction, step.microbatch) != (want.instruction, want.microbatch):
                raise UsageError(
                    f"stage {stage} of the plan runs {step.instruction} {step.microbatch} where the "
                    f"{dag.schedule_name} schedule runs {want.instruction} {want.microbatch}"
                )
            frequencies[node] = step.planned_mhz()
    return problem.choice_for_frequencies(frequencies)


def plan_to_json(plan: Plan) -> list[list[list[str | int]]]:
    """`plan[s]` as a list of `[instruction, microbatch, frequency_mhz]`."""
    return [[[step.instruction, step.microbatch, step.planned_mhz()] for step in steps] for steps in plan]


def plan_from_json(data: object, where: str) -> Plan:
    """Parse and check the JSON form of a plan; errors name `where` and the offending entry."""
    if not isinstance(data, list) or not data:
        raise UsageError(f"{where}: plan must be a non-empty list with one list of steps per stage")
    stages: list[tuple[Step, ...]] = []
    for s, steps in enumerate(data):
        if not isinstance(steps, list):
            raise UsageError(f"{where}: plan[{s}] must be a list of [instruction, microbatch, frequency_mhz]")
        parsed: list[Step] = []
        for k, item in enumerate(steps):
            ok = (
                isinstance(item, list)
                and len(item) == 3
                and item[0] in INSTRUCTIONS
                and is_whole(item[1])
                and item[1] >= 0
                and is_whole(item[2])
                and item[2] > 0
            )
            if not ok:
                raise UsageError(
                    f'{where}: plan[{s}][{k}] must be ["forward"|"backward", microbatch >= 0, '
                    f"frequency_mhz > 0] (got {item!r})"
                )
            parsed.append(Step(item[0], int(item[1]), int(item[2])))
        stages.append(tuple(parsed))
    return tuple(stages)


def check_plan(plan: Plan, schedule: str, microbatches: int, where: str) -> None:
    """Raise a `UsageError` unless every stage of `plan` runs exactly what `schedule` runs for `microbatches`.

    Each stage runs a forward and a backward of every microbatch (2 x microbatches instructions), in the
    schedule's order; a plan that does not would lock the wrong clocks for the wrong instructions.
    """
    if not is_whole(microbatches) or microbatches < 1:
        raise UsageError(f"{where}: microbatches must be a positive integer (got {microbatches!r})")
    if schedule not in SCHEDULES:
        raise UsageError(f"{where}: schedule must be one of {', '.join(SCHEDULES)} (got {schedule!r})")
    expected = build_schedule(schedule, len(plan), microbatches)
    for stage, (steps, want) in enumerate(zip(plan, expected, strict=True)):
        if len(steps) != len(want):
            raise UsageError(
                f"{where}: plan stage {stage} has {len(steps)} instructions; the {schedule} schedule of "
                f"{microbatches} microbatches runs {len(want)} (2 x microbatches); recompute the plan"
            )
        for k, (step, ref) in enumerate(zip(steps, want, strict=True)):
            if (step.instruction, step.microbatch) != (ref.instruction, ref.microbatch):
                raise UsageError(
                    f"{where}: plan[{stage}][{k}] is {step.instruction} {step.microbatch} where the "
                    f"{schedule} schedule runs {ref.instruction} {ref.microbatch}; recompute the plan"
                )


@dataclass(frozen=True, eq=False)
class PlanMatrix:
    """Every point's plan in one integer matrix: `indices[k, j]` indexes `frequencies_mhz`.

    Row k is the k-th point of the frontier; column j is the j-th instruction counting stage after stage,
    each stage in its schedule's execution order (the order a `Plan` lists them), so the schedule gives
    each column its instruction and microbatch. 5,000 plans of 1,536 instructions take 7.7 MB as uint8
    (fewer than 256 distinct frequencies), against about 40 KB each as nested lists.
    """

    #: Every frequency (MHz) some plan uses, ascending.
    frequencies_mhz: tuple[int, ...]
    #: Shape (points, instructions); uint8, or uint16 past 256 frequencies.
    indices: NDArray[np.unsignedinteger]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanMatrix):
            return NotImplemented
        return self.frequencies_mhz == other.frequencies_mhz and np.array_equal(self.indices, other.indices)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def of_choices(cls, problem: PlanningProblem, choices: Sequence[IntArray]) -> PlanMatrix:
        """The matrix of choice vectors (one global option per DAG node; nodes are in plan order)."""
        frequencies = np.unique(problem.option_frequency_mhz)
        dtype = np.uint8 if len(frequencies) <= 2**8 else np.uint16
        index_of_option = np.searchsorted(frequencies, problem.option_frequency_mhz).astype(dtype)
        indices = np.empty((len(choices), problem.dag.num_nodes), dtype=dtype)
        for row in range(0, len(choices), _ROWS_AT_ONCE):  # stacked a block at a time: few numpy calls
            block = choices[row : row + _ROWS_AT_ONCE]
            np.take(index_of_option, np.array(block), out=indices[row : row + len(block)])
        return cls(tuple(int(f) for f in frequencies), indices)

    def frequencies_of(self, row: int) -> list[int]:
        """The frequency (MHz) of every instruction of one row's plan, in column order."""
        return [self.frequencies_mhz[i] for i in self.indices[row].tolist()]

    def plan(self, row: int, schedule: str, stages: int, microbatches: int) -> Plan:
        """The plan of one row, for the frontier's schedule, stages and microbatches."""
        frequencies = iter(self.frequencies_of(row))
        return tuple(
            tuple(step.at(next(frequencies)) for step in steps)
            for steps in build_schedule(schedule, stages, microbatches)
        )


@dataclass(frozen=True)
class FrontierEntry:
    """One point of a frontier file: a plan's real time and energy, and the plan when stored."""

    time_s: float
    energy_j: float
    plan: Plan | None = None


@dataclass(frozen=True)
class Frontier:
    """A time-energy frontier of one pipeline, as `wattwise frontier` writes it (points fastest first)."""

    stages: int
    microbatches: int
    schedule: str
    unit_time_s: float
    p_blocking_w: float
    points: tuple[FrontierEntry, ...]
    #: The all-maximum-frequency plan's real time and energy: the baseline of every saving.
    max_frequency_time_s: float
    max_frequency_energy_j: float
    solver: str = "fast"
    #: Every point's plan, row k for `points[k]`; None in files written before it existed.
    plan_matrix: PlanMatrix | None = None
    #: Per stage, how long a clock change takes to act (s), from the profile; empty: not measured. The
    #: plans are then ones the GPUs can follow (`wattwise.pipeline.segments`), and the controller changes
    #: each clock this long ahead of the instruction that needs it.
    clock_change_s: tuple[float, ...] = ()

    def has_plan(self, k: int) -> bool:
        """Whether `points[k]`'s plan is known (spelled out on the point, or in the plan matrix)."""
        return self.plan_matrix is not None or self.points[k].plan is not None

    def with_plan(self, k: int) -> FrontierEntry:
        """`points[k]` carrying its plan; it must have one (`has_plan`)."""
        entry = self.points[k]
        if entry.plan is not None or self.plan_matrix is None:
            return entry
        return replace(entry, plan=self.plan_matrix.plan(k, self.schedule, self.stages, self.microbatches))

    def compute_only_j(self, entry: FrontierEntry) -> float:
        """sum(e_i - P_b * t_i): the part of a point's energy that does not depend on the iteration time."""
        return entry.energy_j - self.p_blocking_w * self.stages * entry.time_s

    def energy_at_j(self, entry: FrontierEntry, iteration_time_s: float) -> float:
        """Energy of a point when every GPU waits until `iteration_time_s` (>= the point's time)."""
        return entry.energy_j + self.p_blocking_w * self.stages * (iteration_time_s - entry.time_s)


@dataclass(frozen=True)
class Choice:
    """A chosen point and how it compares with running at the maximum frequency."""

    entry: FrontierEntry
    mode: PlanMode
    #: The iteration time the energies refer to: the point's own (intrinsic) or the straggler's T'.
    iteration_time_s: float
    energy_j: float
    max_frequency_time_s: float
    #: Energy of the all-maximum-frequency plan at the same iteration time.
    max_frequency_energy_j: float

    @property
    def saving(self) -> float:
        """Fraction of the maximum-frequency energy saved (at the same iteration time)."""
        return 1.0 - self.energy_j / self.max_frequency_energy_j

    @property
    def slowdown(self) -> float:
        """The plan's own iteration time relative to the maximum frequency's, minus one."""
        return self.entry.time_s / self.max_frequency_time_s - 1.0


def choose_intrinsic(frontier: Frontier) -> Choice:
    """Least energy among stored plans (every point's, with a plan matrix) no slower than maximum frequency."""
    limit = frontier.max_frequency_time_s * (1.0 + TIME_TOLERANCE)
    candidates = [k for k, p in enumerate(frontier.points) if frontier.has_plan(k) and p.time_s <= limit]
    if not candidates:
        raise UsageError(
            "no stored plan is as fast as the maximum frequency; recompute the frontier "
            "(wattwise frontier writes that plan)"
        )
    best = frontier.with_plan(min(candidates, key=lambda k: frontier.points[k].energy_j))
    return Choice(
        best,
        PlanMode.INTRINSIC,
        best.time_s,
        best.energy_j,
        frontier.max_frequency_time_s,
        frontier.max_frequency_energy_j,
    )


def choose_for_straggler(frontier: Frontier, straggler_time_s: float) -> Choice:
    """Least energy with blocking until `straggler_time_s`, among stored plans that finish by then.

    With a plan matrix every point's plan is stored.
    """
    if not (isinstance(straggler_time_s, int | float) and math.isfinite(straggler_time_s) and straggler_time_s > 0):
        raise UsageError(f"straggler time must be a positive number of seconds (got {straggler_time_s!r})")
    points = frontier.points
    candidates = [k for k, p in enumerate(points) if frontier.has_plan(k) and p.time_s <= straggler_time_s]
    if not candidates:
        fastest = min(p.time_s for p in points)
        raise UsageError(
            f"no plan finishes by the straggler time {straggler_time_s} s (the fastest takes "
            f"{fastest:.6g} s); the straggler time must be at least that"
        )
    best = frontier.with_plan(min(candidates, key=lambda k: frontier.energy_at_j(points[k], straggler_time_s)))
    baseline_j = frontier.max_frequency_energy_j + frontier.p_blocking_w * frontier.stages * max(
        0.0, straggler_time_s - frontier.max_frequency_time_s
    )
    return Choice(
        best,
        PlanMode.STRAGGLER,
        straggler_time_s,
        frontier.energy_at_j(best, straggler_time_s),
        frontier.max_frequency_time_s,
        baseline_j,
    )


class Timed(Protocol):
    """A point of a frontier as the dominance filters see it: its real time and energy."""

    @property
    def time_s(self) -> float:
        """The point's real iteration time, in seconds."""

    @property
    def energy_j(self) -> float:
        """The point's real energy per iteration, in joules."""


T = TypeVar("T", bound=Timed)


def non_dominated(points: Iterable[T], blocking_w: float) -> list[T]:
    """Points that no other point beats on both time and sum(e - P_b * t), fastest first.

    That sum is `energy_j - blocking_w * time_s` (`blocking_w` = P_b * stages); ties keep the first.
    """
    kept: list[T] = []
    for point in sorted(points, key=lambda p: (p.time_s, p.energy_j - blocking_w * p.time_s)):
        if not kept or point.energy_j - blocking_w * point.time_s < kept[-1].energy_j - blocking_w * kept[-1].time_s:
            kept.append(point)
    return kept


class _Point(Timed, Protocol):
    """What `assemble_frontier` needs of a solver's point."""

    @property
    def choice(self) -> IntArray: ...


@dataclass(frozen=True)
class _Candidate:
    time_s: float
    energy_j: float
    choice: IntArray


#: With `plans="some"`, about this many points spread over the frontier carry a plan.
SPREAD_PLANS = 32


def assemble_frontier(
    problem: PlanningProblem,
    points: Sequence[_Point],
    *,
    unit_time_s: float,
    solver: str,
    plans: str = "some",
) -> Frontier:
    """A frontier from solver points: keep the useful ones, attach plans, record the baseline.

    A point is kept when no other point is both no slower and no costlier in sum(e_i - P_b * t_i): that
    keeps every plan worth choosing, with or without a straggler. Every kept point's plan is in the
    frontier's `plan_matrix`; `plans` says which points also spell theirs out as `Step`s (`entry.plan`,
    the `plan` a frontier file shows a reader): with "all" every kept point; with "some", the fastest, the
    slowest, the intrinsic choice (least energy no slower than the maximum frequency), the least-energy
    point and about `SPREAD_PLANS` points evenly spread in between.
    """
    if plans not in ("all", "some"):
        raise UsageError(f"plans must be all or some (got {plans!r})")
    dag = problem.dag
    blocking_w = problem.p_blocking_w * dag.num_stages
    max_choice = problem.max_frequency_choice()
    max_time, max_energy = problem.evaluate(max_choice)
    if points and needs_following(problem):  # plans the GPUs can follow, with their own figures
        choices = np.stack([followable(problem, p.choice) for p in points])
        times, energies = problem.evaluate(choices)
        switching = [switching_energy_j(problem, c) for c in choices]  # the energy of following each plan
        figures = zip(times.tolist(), (np.asarray(energies) + switching).tolist(), choices, strict=True)
        points = [_Candidate(float(t), float(e), c) for t, e, c in figures]
    # The maximum-frequency plan is a real plan too: it stays when nothing beats it.
    candidates: list[_Point] = [*points, _Candidate(float(max_time), float(max_energy), max_choice)]
    kept = non_dominated(candidates, blocking_w)
    with_plan = set(range(len(kept))) if plans == "all" else _spread(kept, float(max_time))
    steps: dict[tuple[int, int], Step] = {}
    entries = tuple(
        FrontierEntry(
            float(p.time_s), float(p.energy_j), plan_from_choice(problem, p.choice, steps) if k in with_plan else None
        )
        for k, p in enumerate(kept)
    )
    return Frontier(
        stages=dag.num_stages,
        microbatches=dag.num_microbatches,
        schedule=dag.schedule_name,
        unit_time_s=float(unit_time_s),
        p_blocking_w=problem.p_blocking_w,
        points=entries,
        max_frequency_time_s=float(max_time),
        max_frequency_energy_j=float(max_energy),
        solver=solver,
        plan_matrix=PlanMatrix.of_choices(problem, [p.choice for p in kept]),
        clock_change_s=(
            tuple(problem.profile.clock_change_of(s) for s in range(dag.num_stages)) if needs_following(problem) else ()
        ),
    )


def _spread(points: Sequence[_Point], max_frequency_time_s: float) -> set[int]:
    """Indices of the points that carry a plan by default."""
    if not points:
        return set()
    chosen = {0, len(points) - 1, min(range(len(points)), key=lambda k: points[k].energy_j)}
    limit = max_frequency_time_s * (1.0 + TIME_TOLERANCE)
    intrinsic = [k for k, p in enumerate(points) if p.time_s <= limit]
    if intrinsic:
        chosen.add(min(intrinsic, key=lambda k: points[k].energy_j))
    chosen.update(int(k) for k in np.linspace(0, len(points) - 1, SPREAD_PLANS).round())
    return chosen
