"""FRONTIER.json, FRONTIER.csv and PLAN.json: writing them and reading them back with clear errors.

FRONTIER.json:

    {"stages": S, "microbatches": M, "schedule": "1f1b", "unit_time_s": U, "p_blocking_w": W,
     "solver": "fast", "max_frequency": {"time_s": ..., "energy_j": ...},
     "points": [{"time_s": ..., "energy_j": ..., "plan": [[["forward", 0, 1410], ...], ...]}, ...]}

Points are sorted fastest first; `plan` is present on the points that carry one (all of them when the
frontier was assembled with `plans="all"`). PLAN.json holds one chosen plan and the figures that justify
it (see `plan_json`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from wattwise.errors import UsageError
from wattwise.paths import json_text, replace_file
from wattwise.pipeline.plan import Choice, Frontier, FrontierEntry, Plan, check_plan, plan_from_json, plan_to_json
from wattwise.pipeline.schedule import INSTRUCTIONS, SCHEDULES


def frontier_json(frontier: Frontier) -> dict[str, Any]:
    """The JSON document of a frontier."""
    points: list[dict[str, Any]] = []
    for entry in frontier.points:
        point: dict[str, Any] = {"time_s": entry.time_s, "energy_j": entry.energy_j}
        if entry.plan is not None:
            point["plan"] = plan_to_json(entry.plan)
        points.append(point)
    return {
        "stages": frontier.stages,
        "microbatches": frontier.microbatches,
        "schedule": frontier.schedule,
        "unit_time_s": frontier.unit_time_s,
        "p_blocking_w": frontier.p_blocking_w,
        "solver": frontier.solver,
        "max_frequency": {"time_s": frontier.max_frequency_time_s, "energy_j": frontier.max_frequency_energy_j},
        "points": points,
    }


def write_frontier_json(frontier: Frontier, path: str | Path) -> None:
    _write_json(frontier_json(frontier), path)


def write_frontier_csv(frontier: Frontier, path: str | Path) -> None:
    """`time_s,energy_j,has_plan`, one row per point, fastest first (a link at `path` is replaced)."""

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh)
        writer.writerow(["time_s", "energy_j", "has_plan"])
        for entry in frontier.points:
            writer.writerow([repr(entry.time_s), repr(entry.energy_j), int(entry.plan is not None)])

    _write(path, write)


def read_frontier_json(path: str | Path) -> Frontier:
    """Read and check a FRONTIER.json; every error names the field and the fix."""
    where = str(path)
    data = _read_json(path)
    if "points" not in data and "plan" in data:
        raise UsageError(f"{where}: this is a PLAN.json (written by wattwise plan), not a frontier; pass the "
                         "FRONTIER.json written by wattwise frontier")
    stages = _positive_int(data, "stages", where)
    microbatches = _positive_int(data, "microbatches", where)
    schedule = data.get("schedule")
    if schedule not in SCHEDULES:
        raise UsageError(f"{where}: schedule must be one of {', '.join(SCHEDULES)} (got {schedule!r})")
    unit_time_s = _positive_number(data, "unit_time_s", where)
    p_blocking_w = _number(data, "p_blocking_w", where, minimum=0.0)
    baseline = data.get("max_frequency")
    if not isinstance(baseline, dict):
        raise UsageError(f"{where}: max_frequency must be an object with time_s and energy_j; "
                         "recompute the file with wattwise frontier")
    max_time = _positive_number(baseline, "time_s", f"{where}: max_frequency")
    max_energy = _positive_number(baseline, "energy_j", f"{where}: max_frequency")
    raw_points = data.get("points")
    if not isinstance(raw_points, list) or not raw_points:
        raise UsageError(f"{where}: points must be a non-empty list of {{time_s, energy_j, plan}}")
    points: list[FrontierEntry] = []
    for k, raw in enumerate(raw_points):
        here = f"{where}: points[{k}]"
        if not isinstance(raw, dict):
            raise UsageError(f"{here} must be an object with time_s and energy_j")
        plan = None
        if raw.get("plan") is not None:
            plan = plan_from_json(raw["plan"], f"{here}")
            if len(plan) != stages:
                raise UsageError(f"{here}: plan has {len(plan)} stages but the file says stages = {stages}")
            check_plan(plan, schedule, microbatches, here)
        time_s = _positive_number(raw, "time_s", here)
        points.append(FrontierEntry(time_s, _positive_number(raw, "energy_j", here), plan))
    solver = data.get("solver", "fast")
    return Frontier(
        stages=stages,
        microbatches=microbatches,
        schedule=schedule,
        unit_time_s=unit_time_s,
        p_blocking_w=p_blocking_w,
        points=tuple(sorted(points, key=lambda p: p.time_s)),
        max_frequency_time_s=max_time,
        max_frequency_energy_j=max_energy,
        solver=str(solver),
    )


def plan_json(frontier: Frontier, choice: Choice) -> dict[str, Any]:
    """The PLAN.json document of a chosen point; its plan must follow the frontier's schedule."""
    assert choice.entry.plan is not None
    check_plan(choice.entry.plan, frontier.schedule, frontier.microbatches, "PLAN.json")
    return {
        "stages": frontier.stages,
        "microbatches": frontier.microbatches,
        "schedule": frontier.schedule,
        "mode": choice.mode,
        "iteration_time_s": choice.iteration_time_s,
        "time_s": choice.entry.time_s,
        "energy_j": choice.entry.energy_j,
        "energy_at_iteration_time_j": choice.energy_j,
        "max_frequency_time_s": choice.max_frequency_time_s,
        "max_frequency_energy_j": choice.max_frequency_energy_j,
        "saving": choice.saving,
        "slowdown": choice.slowdown,
        "plan": plan_to_json(choice.entry.plan),
    }


def write_plan_json(frontier: Frontier, choice: Choice, path: str | Path) -> None:
    _write_json(plan_json(frontier, choice), path)


def check_plan_document(data: object, where: str) -> Plan:
    """Check a PLAN.json's content (as `wattwise plan` writes it) before following it; returns its plan.

    `stages`, `microbatches` and `schedule`, where present, must be whole and agree with `plan`; every stage
    must then run exactly that schedule's instructions. Without them (a hand-written plan) every stage must
    still run the forward and the backward of each microbatch once. Errors name the field.
    """
    if not isinstance(data, dict):
        raise UsageError(f"{where}: the top level must be a JSON object written by wattwise plan")
    plan = plan_from_json(data.get("plan"), where)
    if "stages" in data and _positive_int(data, "stages", where) != len(plan):
        raise UsageError(f"{where}: plan has {len(plan)} stages but the file says stages = {data['stages']}")
    if "microbatches" in data:
        microbatches = _positive_int(data, "microbatches", where)
    else:
        microbatches = 1 + max((step.microbatch for steps in plan for step in steps), default=0)
    if "schedule" in data:
        schedule = data["schedule"]
        if schedule not in SCHEDULES:
            raise UsageError(f"{where}: schedule must be one of {', '.join(SCHEDULES)} (got {schedule!r})")
        check_plan(plan, schedule, microbatches, where)
        return plan
    want = {(instruction, m) for instruction in INSTRUCTIONS for m in range(microbatches)}
    for stage, steps in enumerate(plan):
        if len(steps) != len(want) or {(s.instruction, s.microbatch) for s in steps} != want:
            raise UsageError(f"{where}: plan stage {stage} has {len(steps)} instructions; it must run the forward "
                             f"and the backward of each of {microbatches} microbatches once ({len(want)}, "
                             "2 x microbatches); recompute the plan with wattwise plan")
    return plan


def _write_json(document: dict[str, Any], path: str | Path) -> None:
    text = json_text(document, indent=None, separators=(",", ":"))
    _write(path, lambda fh: fh.write(text + "\n"))


def _write(path: str | Path, write: Callable[[TextIO], object]) -> None:
    """Write `path` through a fresh temporary beside it (`replace_file`): never through a planted link."""
    try:
        replace_file(path, write)
    except OSError as err:
        raise UsageError(f"{path}: cannot write ({err.strerror}); choose a writable path") from None


def _read_json(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; pass a FRONTIER.json written by wattwise frontier") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot be read ({err.strerror or err}); pass a FRONTIER.json written by "
                         "wattwise frontier") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text (byte {err.start}); pass a FRONTIER.json written by "
                         "wattwise frontier") from None
    except (ValueError, RecursionError) as err:  # json.JSONDecodeError, too many digits, nesting too deep
        reason = str(err).splitlines()[0] if isinstance(err, ValueError) else "nested too deeply"
        raise UsageError(f"{path}: not valid JSON ({reason}); pass a FRONTIER.json written by wattwise frontier") \
            from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the top level must be a JSON object")
    return data


def _number(data: dict[str, Any], key: str, where: str, *, minimum: float) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise UsageError(f"{where}: {key} must be a finite number >= {minimum:g} (got {value!r})")
    return float(value)


def _positive_number(data: dict[str, Any], key: str, where: str) -> float:
    value = _number(data, key, where, minimum=0.0)
    if value <= 0:
        raise UsageError(f"{where}: {key} must be positive (got {value!r})")
    return value


def _positive_int(data: dict[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: {key} must be a positive integer (got {value!r})")
    return value
