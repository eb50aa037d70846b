"""Reading a run directory: `summary.json` and `power.csv` as the callback and plugin write them.

The reader is tolerant of missing optional keys (older or partial runs) and strict about the few it
cannot do without (start and end time, total energy): those raise a `UsageError` naming the key.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wattwise.carbon.integrate import DeviceTrace
from wattwise.carbon.series import parse_timestamp_s
from wattwise.errors import UsageError
from wattwise.power_limit import ProfileEntry

SUMMARY_FILE = "summary.json"
POWER_FILE = "power.csv"
SCHEMA_PREFIX = "wattwise.run/"


@dataclass(frozen=True)
class EpochEnergy:
    epoch: int
    time_s: float
    energy_j: float


@dataclass(frozen=True)
class SettingEvent:
    """A device setting applied during the run (e.g. `power_limit_w` = 175 on `rank0/gpu0`)."""

    timestamp_s: float
    device: str
    setting: str
    value: Any


@dataclass(frozen=True)
class PowerLimitSummary:
    """What the power-limit tuning did; energy figures are None when the run did not record them."""

    mode: str | None
    selector: str | None
    eta: float | None
    chosen_power_limit_w: float | None
    profile: tuple[ProfileEntry, ...]
    baseline_energy_j: float | None
    energy_saved_j: float | None


@dataclass(frozen=True)
class RunSummary:
    """The parts of `summary.json` the report uses."""

    schema: str | None
    wattwise_version: str | None
    status: str | None
    simulated: bool
    backend: str | None
    framework: str | None
    hostname: str | None
    #: Model name of each device (`devices[].name`), when the run recorded it.
    device_names: tuple[str, ...]
    start_s: float
    end_s: float
    time_s: float
    energy_j: float
    energy_per_device_j: dict[str, float]
    cpu_energy_j: float | None
    steps: int | None
    epochs: tuple[EpochEnergy, ...]
    power_limit: PowerLimitSummary | None
    settings: dict[str, Any]
    settings_timeline: tuple[SettingEvent, ...]


@dataclass(frozen=True)
class RunDir:
    """A run directory: its summary and, when `power.csv` exists, one power trace per device."""

    path: Path
    summary: RunSummary
    traces: tuple[DeviceTrace, ...] | None


def load_run_dir(path: Path) -> RunDir:
    """Read `path/summary.json` and (if present) `path/power.csv`."""
    summary_path = path / SUMMARY_FILE
    if not summary_path.is_file():
        raise UsageError(f"RUN_DIR: {summary_path} not found; pass the directory a wattwise run wrote")
    try:
        raw = json.loads(summary_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"RUN_DIR: {summary_path} is not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise UsageError(f"RUN_DIR: {summary_path} must hold a JSON object")
    summary = parse_summary(raw, where=str(summary_path))
    power_path = path / POWER_FILE
    traces = load_power_csv(power_path) if power_path.is_file() else None
    return RunDir(path, summary, traces)


def parse_summary(raw: dict[str, Any], *, where: str) -> RunSummary:
    """Validate a summary dict; missing optional keys become None or empty."""
    schema = raw.get("schema")
    if schema is not None and not str(schema).startswith(SCHEMA_PREFIX):
        raise UsageError(f"{where}: schema {schema!r} is not a wattwise run summary ({SCHEMA_PREFIX}N)")
    for key in ("start_time", "end_time", "energy_j"):
        if raw.get(key) is None:
            raise UsageError(f"{where}: key {key!r} is missing; the report needs it (re-run, or add it)")
    start_s = parse_timestamp_s(str(raw["start_time"]), where=f"{where}: start_time")
    end_s = parse_timestamp_s(str(raw["end_time"]), where=f"{where}: end_time")
    if end_s < start_s:
        raise UsageError(f"{where}: end_time is before start_time")
    backend = _opt_str(raw.get("backend"))
    simulated = raw.get("simulated")
    limit = raw.get("power_limit")
    return RunSummary(
        schema=_opt_str(schema),
        wattwise_version=_opt_str(raw.get("wattwise_version")),
        status=_opt_str(raw.get("status")),
        simulated=bool(simulated) if simulated is not None else backend == "simulated",
        backend=backend,
        framework=_opt_str(raw.get("framework")),
        hostname=_opt_str(raw.get("hostname")),
        device_names=tuple(str(d["name"]) for d in raw.get("devices") or [] if isinstance(d, dict) and d.get("name")),
        start_s=start_s,
        end_s=end_s,
        time_s=_number(raw.get("time_s"), where, "time_s") if raw.get("time_s") is not None else end_s - start_s,
        energy_j=_number(raw["energy_j"], where, "energy_j"),
        energy_per_device_j={
            str(k): _number(v, where, f"energy_per_device_j.{k}")
            for k, v in (raw.get("energy_per_device_j") or {}).items()
        },
        cpu_energy_j=_opt_number(raw.get("cpu_energy_j"), where, "cpu_energy_j"),
        steps=int(raw["steps"]) if raw.get("steps") is not None else None,
        epochs=tuple(
            EpochEnergy(
                int(e.get("epoch", i)),
                _number(e.get("time_s"), where, f"epochs[{i}].time_s"),
                _number(e.get("energy_j"), where, f"epochs[{i}].energy_j"),
            )
            for i, e in enumerate(raw.get("epochs") or [])
        ),
        power_limit=_parse_power_limit(limit, where) if isinstance(limit, dict) else None,
        settings=dict(raw.get("settings") or {}),
        settings_timeline=tuple(
            SettingEvent(
                _number(e.get("timestamp"), where, f"settings_timeline[{i}].timestamp"),
                str(e.get("device", "")),
                str(e.get("setting", "")),
                e.get("value"),
            )
            for i, e in enumerate(raw.get("settings_timeline") or [])
        ),
    )


def load_power_csv(path: Path) -> tuple[DeviceTrace, ...]:
    """Read `timestamp,device,power_w` rows into one time-sorted trace per device (duplicates dropped)."""
    by_device: dict[str, tuple[list[float], list[float]]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = {"timestamp", "device", "power_w"} - set(reader.fieldnames or [])
        if missing:
            raise UsageError(f"{path}: header must include timestamp,device,power_w (missing {sorted(missing)})")
        for line, row in enumerate(reader, start=2):
            try:
                t_s, power_w = float(row["timestamp"]), float(row["power_w"])
            except (TypeError, ValueError):
                raise UsageError(f"{path} line {line}: timestamp and power_w must be numbers") from None
            if not (math.isfinite(t_s) and math.isfinite(power_w)) or power_w < 0:
                raise UsageError(f"{path} line {line}: power_w must be a finite number >= 0 at a finite time")
            times, powers = by_device.setdefault(row["device"], ([], []))
            times.append(t_s)
            powers.append(power_w)
    traces = []
    for device, (times, powers) in sorted(by_device.items()):
        t = np.array(times, dtype=np.float64)
        p = np.array(powers, dtype=np.float64)
        order = np.argsort(t, kind="stable")
        unique_t, first = np.unique(t[order], return_index=True)
        traces.append(DeviceTrace(device, unique_t, p[order][first]))
    return tuple(traces)


def _parse_power_limit(raw: dict[str, Any], where: str) -> PowerLimitSummary:
    return PowerLimitSummary(
        mode=_opt_str(raw.get("mode")),
        selector=_opt_str(raw.get("selector")),
        eta=_opt_number(raw.get("eta"), where, "power_limit.eta"),
        chosen_power_limit_w=_opt_number(raw.get("chosen_power_limit_w"), where, "power_limit.chosen_power_limit_w"),
        profile=tuple(
            ProfileEntry(
                _number(e.get("power_limit_w"), where, f"power_limit.profile[{i}].power_limit_w"),
                _number(e.get("time_s"), where, f"power_limit.profile[{i}].time_s"),
                _number(e.get("energy_j"), where, f"power_limit.profile[{i}].energy_j"),
            )
            for i, e in enumerate(raw.get("profile") or [])
        ),
        baseline_energy_j=_opt_number(raw.get("baseline_energy_j"), where, "power_limit.baseline_energy_j"),
        energy_saved_j=_opt_number(raw.get("energy_saved_j"), where, "power_limit.energy_saved_j"),
    )


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{where}: {key} must be a finite number (got {value!r})")
    return float(value)


def _opt_number(value: Any, where: str, key: str) -> float | None:
    return None if value is None else _number(value, where, key)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
