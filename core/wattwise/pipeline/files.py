"""FRONTIER.json, FRONTIER.csv and PLAN.json: writing them and reading them back with clear errors.

FRONTIER.json:

    {"stages": S, "microbatches": M, "schedule": "1f1b", "unit_time_s": U, "p_blocking_w": W,
     "solver": "fast", "max_frequency": {"time_s": ..., "energy_j": ...},
     "points": [{"time_s": ..., "energy_j": ..., "plan": [[["forward", 0, 1410], ...], ...]}, ...],
     "plan_matrix": {"encoding": "delta-zlib-base64", "dtype": "uint8", "shape": [P, N],
                     "frequencies_mhz": [210, 225, ...], "data": "eJzt..."}}

Points are sorted fastest first; `plan` is spelled out on the points that carry one (all of them when the
frontier was assembled with `plans="all"`, about 35 by default). `plan_matrix` holds every point's plan,
compactly: P = len(points) rows, row k for points[k]; N = 2 x S x M columns, column j for the j-th
instruction counting stage after stage, each stage in its schedule's execution order (as `plan` lists
them); each cell an index into `frequencies_mhz` (ascending MHz), stored as `dtype` (uint8, or uint16 past
256 frequencies). `data` is base64 of the zlib stream of the rows, little-endian and row after row, each
row but the first replaced by its difference from the row before modulo 2^bits (neighbouring points
differ in few instructions, so the stream is mostly zeros). Files written before `plan_matrix` existed
still load: their choice is among the points that spell out their plan. PLAN.json holds one chosen plan
and the figures that justify it (see `plan_json`).
"""

from __future__ import annotations

import base64
import binascii
import csv
import json
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NotRequired, TextIO, TypedDict

import numpy as np

from wattwise.bounds import BY_SUFFIX, check_field
from wattwise.codec import JsonObject, is_number, is_whole
from wattwise.errors import UsageError
from wattwise.pipeline.plan import (
    Choice,
    Frontier,
    FrontierEntry,
    Plan,
    PlanMatrix,
    check_plan,
    plan_from_json,
    plan_to_json,
)
from wattwise.pipeline.schedule import INSTRUCTIONS, SCHEDULES
from wattwise.safe_files import json_text, replace_file

#: The one encoding of `plan_matrix.data` (see the module docstring).
PLAN_MATRIX_ENCODING = "delta-zlib-base64"
#: Most bytes `plan_matrix` may inflate to, checked before inflating: the largest frontier the solver builds
#: (`MAX_FRONTIER_BYTES`: 8 GiB of int64 choices) as uint8. GPT-3 175B on 8 x 96 stages takes 8 MB.
MAX_PLAN_MATRIX_BYTES = 2**30
_DTYPES: dict[str, np.dtype[Any]] = {"uint8": np.dtype("<u1"), "uint16": np.dtype("<u2")}
#: A plan as its files spell it: per stage, `[instruction, microbatch, frequency_mhz]` in execution order.
PlanSteps = list[list[list[str | int]]]


class FrontierPointJson(TypedDict):
    """One point of FRONTIER.json's `points`: its time and energy, and its plan where it spells one out."""

    time_s: float
    energy_j: float
    plan: NotRequired[PlanSteps]


class BaselineJson(TypedDict):
    """FRONTIER.json's `max_frequency`: every instruction at the highest clock."""

    time_s: float
    energy_j: float


class PlanMatrixJson(TypedDict):
    """FRONTIER.json's `plan_matrix`: every point's plan, delta-coded, zlib, base64 (module docstring)."""

    encoding: str
    dtype: str
    shape: list[int]
    frequencies_mhz: list[int]
    data: str


class FrontierJson(TypedDict):
    """FRONTIER.json, as `wattwise frontier` writes it (module docstring)."""

    stages: int
    microbatches: int
    schedule: str
    unit_time_s: float
    p_blocking_w: float
    solver: str
    max_frequency: BaselineJson
    points: list[FrontierPointJson]
    plan_matrix: NotRequired[PlanMatrixJson]
    #: Per stage, the seconds a clock change takes to act (absent: none measured).
    clock_change_s: NotRequired[list[float]]


class PlanJson(TypedDict):
    """PLAN.json, as `wattwise plan` writes it: one chosen plan and the figures that justify it."""

    stages: int
    microbatches: int
    schedule: str
    mode: str
    iteration_time_s: float
    time_s: float
    energy_j: float
    energy_at_iteration_time_j: float
    max_frequency_time_s: float
    max_frequency_energy_j: float
    saving: float
    slowdown: float
    plan: PlanSteps
    clock_change_s: NotRequired[list[float]]


_MATRIX_FIX = (
    "recompute the file with wattwise frontier, or delete plan_matrix to choose among the points "
    "that spell out their plan"
)


def frontier_json(frontier: Frontier) -> FrontierJson:
    """The JSON document of a frontier."""
    points: list[FrontierPointJson] = []
    for entry in frontier.points:
        point: FrontierPointJson = {"time_s": entry.time_s, "energy_j": entry.energy_j}
        if entry.plan is not None:
            point["plan"] = plan_to_json(entry.plan)
        points.append(point)
    document: FrontierJson = {
        "stages": frontier.stages,
        "microbatches": frontier.microbatches,
        "schedule": frontier.schedule,
        "unit_time_s": frontier.unit_time_s,
        "p_blocking_w": frontier.p_blocking_w,
        "solver": frontier.solver,
        "max_frequency": {"time_s": frontier.max_frequency_time_s, "energy_j": frontier.max_frequency_energy_j},
        "points": points,
    }
    if frontier.plan_matrix is not None:
        document["plan_matrix"] = plan_matrix_json(frontier.plan_matrix)
    if frontier.clock_change_s:
        document["clock_change_s"] = list(frontier.clock_change_s)
    return document


def plan_matrix_json(matrix: PlanMatrix) -> PlanMatrixJson:
    """The `plan_matrix` field: every row but the first as its difference from the one before, zlib, base64."""
    indices = matrix.indices
    deltas = indices.copy()
    deltas[1:] -= indices[:-1]  # unsigned: modulo 2^bits, undone by a cumulative sum
    name = "uint8" if indices.dtype.itemsize == 1 else "uint16"
    dtype = _DTYPES[name]
    return {
        "encoding": PLAN_MATRIX_ENCODING,
        "dtype": name,
        "shape": list(indices.shape),
        "frequencies_mhz": list(matrix.frequencies_mhz),
        "data": base64.b64encode(zlib.compress(deltas.astype(dtype, copy=False).tobytes())).decode("ascii"),
    }


def plan_matrix_from_json(raw: object, shape: tuple[int, int], where: str) -> PlanMatrix:
    """Decode and check a `plan_matrix` field of `shape` (points, instructions); errors name the field."""
    field = f"{where}: plan_matrix"
    if not isinstance(raw, dict):
        raise UsageError(
            f"{field} must be an object with encoding, dtype, shape, frequencies_mhz and data; {_MATRIX_FIX}"
        )
    if raw.get("encoding") != PLAN_MATRIX_ENCODING:
        raise UsageError(
            f"{field}.encoding must be {PLAN_MATRIX_ENCODING!r} (got {raw.get('encoding')!r}); {_MATRIX_FIX}"
        )
    dtype_name = raw.get("dtype")
    dtype = _DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise UsageError(f"{field}.dtype must be uint8 or uint16 (got {raw.get('dtype')!r}); {_MATRIX_FIX}")
    if raw.get("shape") != list(shape):
        raise UsageError(
            f"{field}.shape must be [points, 2 x stages x microbatches] = {list(shape)} "
            f"(got {raw.get('shape')!r}); {_MATRIX_FIX}"
        )
    frequencies = raw.get("frequencies_mhz")
    if (
        not isinstance(frequencies, list)
        or not 0 < len(frequencies) <= 2 ** (8 * dtype.itemsize)
        or not all(is_whole(f) and f > 0 for f in frequencies)
        or frequencies != sorted(set(frequencies))
    ):
        raise UsageError(
            f"{field}.frequencies_mhz must be ascending distinct positive integers, at most "
            f"{2 ** (8 * dtype.itemsize)} for {dtype_name}; {_MATRIX_FIX}"
        )
    size = shape[0] * shape[1] * dtype.itemsize
    if size > MAX_PLAN_MATRIX_BYTES:
        raise UsageError(
            f"{field} would inflate to {size} bytes ({shape[0]} points x {shape[1]} instructions), "
            f"more than the {MAX_PLAN_MATRIX_BYTES} bytes allowed; recompute the frontier with a "
            "larger --unit-time or fewer --microbatches, or delete plan_matrix"
        )
    data = raw.get("data")
    if not isinstance(data, str):
        raise UsageError(f"{field}.data must be a base64 string; {_MATRIX_FIX}")
    try:
        inflater = zlib.decompressobj()
        content = inflater.decompress(base64.b64decode(data, validate=True), size)  # never more than `size`
    except (binascii.Error, ValueError, zlib.error) as err:
        raise UsageError(f"{field}.data is corrupted ({err}); {_MATRIX_FIX}") from None
    if inflater.unconsumed_tail or inflater.unused_data:
        raise UsageError(
            f"{field}.data holds more than its shape {list(shape)} of {dtype_name} ({size} bytes); {_MATRIX_FIX}"
        )
    if not inflater.eof or len(content) != size:
        raise UsageError(f"{field}.data is truncated ({len(content)} of {size} bytes); {_MATRIX_FIX}")
    indices = np.frombuffer(content, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    for row in range(1, shape[0]):  # row by row: 10 x faster than np.cumsum(axis=0) on small integers
        np.add(indices[row], indices[row - 1], out=indices[row])
    if indices.size and int(indices.max()) >= len(frequencies):
        raise UsageError(
            f"{field}.data indexes frequency {int(indices.max())} of {len(frequencies)} "
            f"(frequencies_mhz); {_MATRIX_FIX}"
        )
    return PlanMatrix(tuple(int(f) for f in frequencies), indices)


def write_frontier_json(frontier: Frontier, path: str | Path) -> None:
    """Write `frontier` as FRONTIER.json (every point, the plans chosen by `plans`, the compact plan matrix)."""
    _write_json(frontier_json(frontier), path)


def write_frontier_csv(frontier: Frontier, path: str | Path) -> None:
    """`time_s,energy_j,has_plan`, one row per point, fastest first (a link at `path` is replaced)."""

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh)
        writer.writerow(["time_s", "energy_j", "has_plan"])
        for k, entry in enumerate(frontier.points):
            writer.writerow([repr(entry.time_s), repr(entry.energy_j), int(frontier.has_plan(k))])

    _write(path, write)


def read_frontier_json(path: str | Path) -> Frontier:
    """Read and check a FRONTIER.json; every error names the field and the fix."""
    where = str(path)
    data = _read_json(path)
    top = JsonObject(data, where, fix="")
    if "points" not in data and "plan" in data:
        raise UsageError(
            f"{where}: this is a PLAN.json (written by wattwise plan), not a frontier; pass the "
            "FRONTIER.json written by wattwise frontier"
        )
    stages = _positive_int(top, "stages")
    microbatches = _positive_int(top, "microbatches")
    schedule = data.get("schedule")
    if schedule not in SCHEDULES:
        raise UsageError(f"{where}: schedule must be one of {', '.join(SCHEDULES)} (got {schedule!r})")
    unit_time_s = _positive_number(top, "unit_time_s")
    p_blocking_w = _number(top, "p_blocking_w", minimum=0.0)
    baseline = data.get("max_frequency")
    if not isinstance(baseline, dict):
        raise UsageError(
            f"{where}: max_frequency must be an object with time_s and energy_j; "
            "recompute the file with wattwise frontier"
        )
    max_frequency = JsonObject(baseline, f"{where}: max_frequency", fix="")
    max_time = _positive_number(max_frequency, "time_s")
    max_energy = _positive_number(max_frequency, "energy_j")
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
        point = JsonObject(raw, here, fix="")
        time_s = _positive_number(point, "time_s")
        points.append(FrontierEntry(time_s, _positive_number(point, "energy_j"), plan))
    matrix = None
    if data.get("plan_matrix") is not None:
        matrix = plan_matrix_from_json(data["plan_matrix"], (len(points), 2 * stages * microbatches), where)
        for k, entry in enumerate(points):
            if entry.plan is not None and [
                s.frequency_mhz for steps in entry.plan for s in steps
            ] != matrix.frequencies_of(k):
                raise UsageError(f"{where}: points[{k}].plan is not row {k} of plan_matrix; {_MATRIX_FIX}")
    order = sorted(range(len(points)), key=lambda k: points[k].time_s)
    if matrix is not None and order != list(range(len(points))):
        matrix = PlanMatrix(matrix.frequencies_mhz, matrix.indices[order])
    solver = data.get("solver", "fast")
    clock_change_s = _latencies(data, stages, where)
    return Frontier(
        stages=stages,
        microbatches=microbatches,
        schedule=schedule,
        unit_time_s=unit_time_s,
        p_blocking_w=p_blocking_w,
        points=tuple(points[k] for k in order),
        max_frequency_time_s=max_time,
        max_frequency_energy_j=max_energy,
        solver=str(solver),
        plan_matrix=matrix,
        clock_change_s=clock_change_s,
    )


def _latencies(data: Mapping[str, object], stages: int, where: str) -> tuple[float, ...]:
    """The optional `clock_change_s` list: one latency (s) per stage; absent: ()."""
    raw = data.get("clock_change_s")
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) != stages or not all(is_number(v) and 0 <= v <= 10 for v in raw):
        raise UsageError(
            f"{where}: clock_change_s must list one latency per stage, each between 0 and 10 seconds "
            f"(got {raw!r}); recompute the file with wattwise frontier"
        )
    return tuple(float(v) for v in raw)


def plan_json(frontier: Frontier, choice: Choice) -> PlanJson:
    """The PLAN.json document of a chosen point; its plan must follow the frontier's schedule."""
    assert choice.entry.plan is not None
    check_plan(choice.entry.plan, frontier.schedule, frontier.microbatches, "PLAN.json")
    document: PlanJson = {
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
    if frontier.clock_change_s:
        document["clock_change_s"] = list(frontier.clock_change_s)
    return document


def write_plan_json(frontier: Frontier, choice: Choice, path: str | Path) -> None:
    """Write the plan `choice` of `frontier` as PLAN.json, with its time, energy, saving and slowdown."""
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
    document = JsonObject(data, where, fix="")
    if "stages" in data and _positive_int(document, "stages") != len(plan):
        raise UsageError(f"{where}: plan has {len(plan)} stages but the file says stages = {data['stages']}")
    if "microbatches" in data:
        microbatches = _positive_int(document, "microbatches")
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
            raise UsageError(
                f"{where}: plan stage {stage} has {len(steps)} instructions; it must run the forward "
                f"and the backward of each of {microbatches} microbatches once ({len(want)}, "
                "2 x microbatches); recompute the plan with wattwise plan"
            )
    return plan


def _write_json(document: FrontierJson | PlanJson, path: str | Path) -> None:
    text = json_text(document, indent=None, separators=(",", ":"))
    _write(path, lambda fh: fh.write(text + "\n"))


def _write(path: str | Path, write: Callable[[TextIO], object]) -> None:
    """Write `path` through a fresh temporary beside it (`replace_file`): never through a planted link."""
    try:
        replace_file(path, write)
    except OSError as err:
        raise UsageError(f"{path}: cannot write ({err.strerror}); choose a writable path") from None


#: What every error reading a frontier file asks for.
_FRONTIER_FIX = "pass a FRONTIER.json written by wattwise frontier"


def _read_json(path: str | Path) -> dict[str, object]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; {_FRONTIER_FIX}") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot be read ({err.strerror or err}); {_FRONTIER_FIX}") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 text (byte {err.start}); {_FRONTIER_FIX}") from None
    except (ValueError, RecursionError) as err:  # json.JSONDecodeError, too many digits, nesting too deep
        reason = str(err).splitlines()[0] if isinstance(err, ValueError) else "nested too deeply"
        raise UsageError(f"{path}: not valid JSON ({reason}); {_FRONTIER_FIX}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the top level must be a JSON object")
    return data


def _number(f: JsonObject, key: str, *, minimum: float) -> float:
    """The number at `key`: finite, at least `minimum`, and within its unit's bound when its name has one."""
    value = f.raw.get(key)
    if not is_number(value) or value < minimum:
        f.refuse(key, f"a finite number >= {minimum:g}", value)
    if key.endswith(tuple(BY_SUFFIX)):  # a figure with its unit: within that unit's physical bound
        return check_field(key, value, f.where)
    return float(value)


def _positive_number(f: JsonObject, key: str) -> float:
    value = _number(f, key, minimum=0.0)
    if value <= 0:
        f.refuse(key, "positive", value)
    return value


def _positive_int(f: JsonObject, key: str) -> int:
    value = f.raw.get(key)
    if not is_whole(value) or value < 1:
        f.refuse(key, "a positive integer", value)
    return value
