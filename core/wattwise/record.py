"""The run record, `wattwise.run/1`: the three files a run leaves in its output directory, typed.

- `summary.json`: one `RunSummary`, the figures of the whole run, its settings and its decisions;
- `windows.csv`: one `WindowRow` per measurement window that ended, written as the run goes (`WindowsLog`);
- `power.csv`: one `PowerRow` per device per power sample.

This module is the only writer and the only reader of these files. Writing never follows a symlink
planted in the output directory: each file is created under a fresh temporary name beside its target
(O_CREAT|O_EXCL|O_NOFOLLOW) and moved into place with `os.replace`, which replaces a link instead of
following it. JSON never holds NaN or Infinity: a figure that is not finite is unknown, written as null.
Reading validates what the writer guarantees (types, finite numbers, non-negative energies and times,
required columns, whole rows, UTF-8 text, regular files) and turns a damaged file into a one-line
`UsageError` naming the file, the field and the fix. Keys and columns it does not know are ignored, so
the record may grow; keys that older or hand-made summaries lack are None (or empty) unless the report
cannot do without them (start and end time, energy).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn, TextIO

import numpy as np

from wattwise import __version__
from wattwise.carbon.integrate import J_PER_KWH, DeviceTrace
from wattwise.carbon.series import parse_timestamp_s
from wattwise.errors import UsageError
from wattwise.paths import create_beside, finite_or_null, read_text, replace_file
from wattwise.power_limit import ProfileEntry

SCHEMA = "wattwise.run/1"
SCHEMA_PREFIX = "wattwise.run/"
SUMMARY_FILE = "summary.json"
WINDOWS_FILE = "windows.csv"
POWER_FILE = "power.csv"
POWER_COLUMNS = ("timestamp", "device", "power_w")
#: The columns of windows.csv; each device adds `<key>_energy_j` between `energy_j` and `approximate`.
WINDOW_COLUMNS = ("start_time", "window_name", "time_s", "energy_j", "approximate", "simulated")

#: A value in the settings timeline: a JSON scalar.
SettingValue = bool | int | float | str | None

_FIX = "the run directory is damaged: re-run the job, or restore the file"
#: The largest magnitude any figure of a run may have (1e15 J is 278 GWh, 1e15 s 30 million years): more
#: is a damaged file, and would overflow the sums a report makes.
MAX_FIGURE = 1e15


def iso_utc(t_s: float) -> str:
    """A unix time as `summary.json` holds it: ISO 8601 in UTC."""
    return datetime.fromtimestamp(t_s, tz=timezone.utc).isoformat()


# -- summary.json --------------------------------------------------------------------------------------
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
    value: SettingValue

    def to_dict(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp_s, "device": self.device, "setting": self.setting, "value": self.value}


@dataclass(frozen=True)
class TuningSummary:
    """Whether power-limit tuning profiled every limit; when not, why, and what it measured."""

    finished: bool
    #: The limits profiled, highest first.
    profiled: tuple[float, ...] = ()
    reason: str | None = None
    #: Optimizer steps run at the chosen limit (the estimated saving counts these).
    steps_at_chosen: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"finished": self.finished, "profiled": list(self.profiled), "reason": self.reason,
                "steps_at_chosen": self.steps_at_chosen}


@dataclass(frozen=True)
class NonTrainingTime:
    """Time that was not training (one kind: validation, checkpoint, ...), excluded from step figures."""

    time_s: float
    energy_j: float
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"time_s": self.time_s, "energy_j": self.energy_j, "count": self.count}


@dataclass(frozen=True, kw_only=True)
class PowerLimitSummary:
    """What the power-limit part did: a cap, or tuning (profile, choice, estimated saving)."""

    #: "cap" or "tune". A cap records only the mode and the limit.
    mode: str
    chosen_power_limit_w: float | None = None
    selector: str | None = None
    eta: float | None = None
    max_slowdown: float | None = None
    #: The choice came from the limits memory of an earlier run, without profiling.
    reused: bool = False
    profile: tuple[ProfileEntry, ...] = ()
    #: Energy the run would have used at the highest limit, and the difference (None until chosen).
    baseline_energy_j: float | None = None
    energy_saved_j: float | None = None
    baseline_estimated: bool = False
    #: A reused limit: the run that chose it and when (unix seconds); `selector` and `eta` are that run's.
    reused_run_id: str | None = None
    reused_chosen_at_s: float | None = None
    #: Whether tuning finished (None in summaries of earlier wattwise versions, which did not say).
    tuning: TuningSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.mode == "cap":
            return {"mode": self.mode, "chosen_power_limit_w": self.chosen_power_limit_w}
        info: dict[str, Any] = {
            "mode": self.mode, "selector": self.selector, "eta": self.eta, "max_slowdown": self.max_slowdown,
            "reused": self.reused, "chosen_power_limit_w": self.chosen_power_limit_w,
            "profile": [{"power_limit_w": e.power_limit_w, "time_s": e.time_s, "energy_j": e.energy_j}
                        for e in self.profile],
            "baseline_energy_j": self.baseline_energy_j, "energy_saved_j": self.energy_saved_j,
        }
        if self.baseline_estimated:
            info["baseline_estimated"] = True
        if self.reused:
            info["reused_from"] = {"run_id": self.reused_run_id,
                                   "chosen_at": iso_utc(self.reused_chosen_at_s)
                                   if self.reused_chosen_at_s is not None else None}
        if self.tuning is not None:
            info["tuning"] = self.tuning.to_dict()
        return info


@dataclass(frozen=True)
class RunSettings:
    """The settings the run ended with."""

    power_limit_w: float | None = None
    batch_size: int | None = None
    #: Path of the PLAN.json (`wattwise.frequency`) the run followed; None when it followed none.
    frequency_plan: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"power_limit_w": self.power_limit_w, "batch_size": self.batch_size,
                "frequency_plan": self.frequency_plan}


@dataclass(frozen=True)
class CarbonAwareSummary:
    """The carbon-aware power limit's inputs (present when the run switched limits by grid intensity)."""

    threshold_g_per_kwh: float
    interval_s: float
    intensity_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"threshold_g_per_kwh": self.threshold_g_per_kwh, "interval_s": self.interval_s,
                "intensity_source": self.intensity_source}


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """`summary.json`: the whole run, energy summed and time maxed over processes.

    Times are ISO 8601 with a timezone (`iso_utc`); `avg_power_w` is derived from energy and time.
    """

    start_time: str
    end_time: str
    time_s: float
    energy_j: float
    schema: str = SCHEMA
    wattwise_version: str | None = __version__
    #: "completed", "failed", "interrupted", ...
    status: str | None = None
    simulated: bool = False
    backend: str | None = None
    framework: str | None = None
    job: str | None = None
    hostname: str | None = None
    world_size: int | None = None
    energy_per_device_j: Mapping[str, float] = field(default_factory=dict)
    cpu_energy_j: float | None = None
    steps: int | None = None
    epochs: tuple[EpochEnergy, ...] = ()
    #: Energy of the segments before a resume from a checkpoint (included in `energy_j`).
    resumed_energy_j: float = 0.0
    #: Each GPU as `Device.describe()` reports it, plus its `rank`: open-ended.
    devices: tuple[Mapping[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    power_limit: PowerLimitSummary | None = None
    settings: RunSettings = field(default_factory=RunSettings)
    settings_timeline: tuple[SettingEvent, ...] = ()
    carbon_aware: CarbonAwareSummary | None = None
    #: Time that was not training (validation, checkpoints), by kind; included in `time_s`/`energy_j`.
    non_training: Mapping[str, NonTrainingTime] = field(default_factory=dict)

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def start_s(self) -> float:
        return parse_timestamp_s(self.start_time, where="start_time")

    @property
    def end_s(self) -> float:
        return parse_timestamp_s(self.end_time, where="end_time")

    @property
    def device_names(self) -> tuple[str, ...]:
        """Model name of each device (`devices[].name`), when the run recorded it."""
        return tuple(d["name"] for d in self.devices if isinstance(d.get("name"), str) and d["name"])

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of `summary.json`, keys in the order a reader expects them."""
        return {
            "schema": self.schema,
            "wattwise_version": self.wattwise_version,
            "status": self.status,
            "simulated": self.simulated,
            "backend": self.backend,
            "framework": self.framework,
            "job": self.job,
            "hostname": self.hostname,
            "world_size": self.world_size,
            "start_time": self.start_time,
            "end_time": self.end_time,
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "energy_per_device_j": dict(self.energy_per_device_j),
            "cpu_energy_j": self.cpu_energy_j,
            "avg_power_w": self.avg_power_w,
            "steps": self.steps,
            "epochs": [{"epoch": e.epoch, "time_s": e.time_s, "energy_j": e.energy_j} for e in self.epochs],
            "resumed_energy_j": self.resumed_energy_j,
            "devices": [dict(d) for d in self.devices],
            "notes": list(self.notes),
            "power_limit": self.power_limit.to_dict() if self.power_limit is not None else None,
            "settings": self.settings.to_dict(),
            "settings_timeline": [e.to_dict() for e in self.settings_timeline],
            "carbon_aware": self.carbon_aware.to_dict() if self.carbon_aware is not None else None,
            "non_training": {kind: t.to_dict() for kind, t in self.non_training.items()},
        }

    def to_json(self) -> str:
        """`summary.json`'s text: valid JSON, a figure that is not finite written as null."""
        return json.dumps(finite_or_null(self.to_dict()), indent=2, allow_nan=False) + "\n"


def format_summary(summary: RunSummary, *, output_dir: str | os.PathLike[str] | None = None) -> str:
    """The few lines printed at the end of a run: energy, time, power, and what the power-limit choice did."""
    tag = " (SIMULATED GPU: modelled figures, not measurements)" if summary.simulated else ""
    energy_j = summary.energy_j
    lines = [
        f"wattwise{tag}: {summary.framework or ''} run {summary.status or ''}",
        f"  time {summary.time_s:.2f} s, energy {energy_j:.1f} J ({energy_j / J_PER_KWH:.6f} kWh), "
        f"average power {summary.avg_power_w:.1f} W over {len(summary.energy_per_device_j)} GPU(s), "
        f"{summary.steps} steps",
    ]
    pl = summary.power_limit
    if pl is not None and pl.chosen_power_limit_w is not None:
        if pl.mode == "cap":
            lines.append(f"  power cap {pl.chosen_power_limit_w:g} W")
        else:
            if pl.reused:
                how = f"reused from run {pl.reused_run_id}" if pl.reused_run_id else "reused from a previous run"
            else:
                how = f"{len(pl.profile)} limits profiled"
            eta = f"{pl.eta:g}" if pl.eta is not None else "unset"
            lines.append(f"  power limit {pl.chosen_power_limit_w:g} W chosen by {pl.selector} (eta {eta}; {how})")
            if pl.energy_saved_j is not None:
                lines.append(f"  estimated saving against the maximum limit: {pl.energy_saved_j:.1f} J")
    if pl is not None and pl.tuning is not None and not pl.tuning.finished:
        lines.append(f"  tuning did not finish: {pl.tuning.reason}")
    for kind, t in summary.non_training.items():
        lines.append(f"  {kind}: {t.time_s:.2f} s, {t.energy_j:.1f} J ({t.count}x; not in step figures)")
    if output_dir:
        lines.append(f"  summary: {output_dir}/{SUMMARY_FILE}")
    return "\n".join(lines)


# -- windows.csv and power.csv rows --------------------------------------------------------------------
@dataclass(frozen=True)
class WindowRow:
    """One ended measurement window of one process (unix seconds, joules)."""

    start_time: float
    window_name: str
    time_s: float
    energy_j: float
    energy_per_device_j: Mapping[str, float]
    #: Device keys whose energy is power x time because their counter did not tick in the window.
    approximate: tuple[str, ...] = ()
    simulated: bool = False


@dataclass(frozen=True)
class PowerRow:
    """One power sample of one device."""

    timestamp_s: float
    device: str
    power_w: float


def windows_header(device_keys: Sequence[str]) -> list[str]:
    first, last = WINDOW_COLUMNS[:4], WINDOW_COLUMNS[4:]
    return [*first, *(f"{k}_energy_j" for k in device_keys), *last]


def window_cells(row: WindowRow, device_keys: Sequence[str]) -> list[str]:
    return [f"{row.start_time:.6f}", row.window_name, f"{row.time_s:.6f}", f"{row.energy_j:.6f}",
            *(f"{row.energy_per_device_j[k]:.6f}" for k in device_keys),
            ";".join(row.approximate), str(row.simulated).lower()]


def power_rows(samples: Iterable[tuple[float, Mapping[str, float]]]) -> list[PowerRow]:
    """Samples `(unix time, {device: watts})`, in time order (stable), as power.csv rows."""
    ordered = sorted(samples, key=lambda s: s[0])
    return [PowerRow(t_s, device, watts) for t_s, by_device in ordered for device, watts in by_device.items()]


# -- writing -------------------------------------------------------------------------------------------
def write_run_dir(out_dir: str | os.PathLike[str], summary: RunSummary,
                  power: Iterable[PowerRow] | None = None) -> Path:
    """Write `power.csv` (unless `power` is None), then `summary.json`, into `out_dir`; returns it.

    The summary comes last: a run directory with a summary holds everything the run wrote.
    """
    text = summary.to_json()
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    if power is not None:
        write_power_csv(directory / POWER_FILE, power)
    replace_file(directory / SUMMARY_FILE, lambda fh: fh.write(text))
    return directory


def write_power_csv(path: str | os.PathLike[str], rows: Iterable[PowerRow]) -> None:
    """Write `timestamp,device,power_w` rows (unix seconds, watts), replacing `path`.

    A sample that is not a finite number (a device glitch) is left out: it is no sample.
    """

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(POWER_COLUMNS)
        writer.writerows((f"{r.timestamp_s:.3f}", r.device, f"{r.power_w:.3f}") for r in rows
                         if math.isfinite(r.timestamp_s) and math.isfinite(r.power_w))

    replace_file(path, write)


class WindowsLog:
    """`windows.csv` as the run goes: the header at once, then one line per ended window.

    The file is kept open, line-buffered, so each row reaches it as its window ends for one write call.
    Not thread-safe: the monitor serialises writes.
    """

    def __init__(self, path: str | os.PathLike[str], device_keys: Sequence[str]) -> None:
        self.path = Path(path)
        self.device_keys = tuple(device_keys)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = create_beside(self.path)
        self._file: TextIO | None = os.fdopen(fd, "w", encoding="utf-8", newline="", buffering=1)
        self._writer = csv.writer(self._file, lineterminator="\n")
        try:
            self._writer.writerow(windows_header(self.device_keys))
            os.replace(tmp, self.path)  # a new, empty log replaces the last run's (or a planted link)
        except BaseException:
            self.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write(self, row: WindowRow) -> None:
        if self._file is not None:
            self._writer.writerow(window_cells(row, self.device_keys))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# -- reading -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunDir:
    """A run directory as read: its summary and, when `power.csv` exists, one power trace per device."""

    path: Path
    summary: RunSummary
    traces: tuple[DeviceTrace, ...] | None

    def windows(self) -> Iterator[WindowRow]:
        """The rows of `windows.csv` (rank 0's), read and validated as they are iterated; none if absent."""
        path = self.path / WINDOWS_FILE
        return read_windows_csv(path) if os.path.lexists(path) else iter(())


def read_run_dir(path: str | os.PathLike[str]) -> RunDir:
    """Read and validate `path/summary.json` and, if present, `path/power.csv`."""
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"RUN_DIR: {directory} is not a directory; pass the output directory a wattwise run wrote")
    summary = read_summary(directory / SUMMARY_FILE)
    power = directory / POWER_FILE
    traces = read_power_csv(power) if os.path.lexists(power) else None
    return RunDir(directory, summary, traces)


def read_summary(path: Path) -> RunSummary:
    data = _read_text(path, missing=f"{path} not found; pass the directory a wattwise run wrote (RUN_DIR)")
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); {_FIX}") \
            from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{path}: not valid JSON ({type(err).__name__}); {_FIX}") from None
    return parse_summary(raw, where=str(path))


def parse_summary(raw: Any, *, where: str) -> RunSummary:
    """Validate a summary's JSON object; `where` (the file) starts every error message."""
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: must hold a JSON object (a wattwise run summary); {_FIX}")
    f = _Fields(raw, where)
    schema = f.opt_text("schema")
    if schema is not None and not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(f"{where}: schema {schema!r} is not a wattwise run summary ({SCHEMA_PREFIX}N); "
                         "pass the summary.json of a wattwise run")
    start_time, start_s = f.timestamp("start_time")
    end_time, end_s = f.timestamp("end_time")
    if end_s < start_s:
        raise UsageError(f"{where}: end_time {end_time!r} is before start_time {start_time!r}; {_FIX}")
    backend = f.opt_text("backend")
    simulated = f.opt_bool("simulated")
    time_s = f.opt_number("time_s")
    f.opt_number("avg_power_w")  # derived from energy and time; checked, not kept
    limit, settings, carbon = f.opt_object("power_limit"), f.opt_object("settings"), f.opt_object("carbon_aware")
    return RunSummary(
        schema=schema or SCHEMA,
        wattwise_version=f.opt_text("wattwise_version"),
        status=f.opt_text("status"),
        simulated=simulated if simulated is not None else backend == "simulated",
        backend=backend,
        framework=f.opt_text("framework"),
        job=f.opt_text("job"),
        hostname=f.opt_text("hostname"),
        world_size=f.opt_int("world_size", minimum=1),
        start_time=start_time,
        end_time=end_time,
        time_s=time_s if time_s is not None else end_s - start_s,
        energy_j=f.number("energy_j"),
        energy_per_device_j=f.number_map("energy_per_device_j"),
        cpu_energy_j=f.opt_number("cpu_energy_j"),
        steps=f.opt_int("steps"),
        epochs=tuple(_epoch(e, i) for i, e in enumerate(f.objects("epochs"))),
        resumed_energy_j=f.opt_number("resumed_energy_j") or 0.0,
        devices=tuple(d.raw for d in f.objects("devices")),
        notes=f.strings("notes"),
        power_limit=_power_limit(limit) if limit is not None else None,
        settings=RunSettings(
            power_limit_w=settings.opt_number("power_limit_w"),
            batch_size=settings.opt_int("batch_size", minimum=1),
            frequency_plan=settings.opt_text("frequency_plan"),
        ) if settings is not None else RunSettings(),
        settings_timeline=tuple(SettingEvent(e.number("timestamp", minimum=None), e.text("device"),
                                             e.text("setting"), e.scalar("value"))
                                for e in f.objects("settings_timeline")),
        carbon_aware=CarbonAwareSummary(
            carbon.number("threshold_g_per_kwh"), carbon.number("interval_s"), carbon.opt_text("intensity_source")
        ) if carbon is not None else None,
        non_training=_non_training(f.opt_object("non_training")),
    )


def _non_training(f: _Fields | None) -> dict[str, NonTrainingTime]:
    if f is None:
        return {}
    out = {}
    for kind in f.raw:
        entry = f.opt_object(kind)
        if entry is None:
            continue
        count = entry.opt_int("count")
        out[str(kind)] = NonTrainingTime(entry.number("time_s"), entry.number("energy_j"), count or 0)
    return out


def _epoch(f: _Fields, index: int) -> EpochEnergy:
    number = f.opt_int("epoch")
    return EpochEnergy(index if number is None else number, f.number("time_s"), f.number("energy_j"))


def _power_limit(f: _Fields) -> PowerLimitSummary:
    reused, tuning = f.opt_object("reused_from"), f.opt_object("tuning")
    return PowerLimitSummary(
        mode=f.text("mode"),
        chosen_power_limit_w=f.opt_number("chosen_power_limit_w"),
        selector=f.opt_text("selector"),
        eta=f.opt_number("eta"),
        max_slowdown=f.opt_number("max_slowdown"),
        reused=bool(f.opt_bool("reused")),
        profile=tuple(ProfileEntry(e.number("power_limit_w"), e.number("time_s"), e.number("energy_j"))
                      for e in f.objects("profile")),
        baseline_energy_j=f.opt_number("baseline_energy_j"),
        # A limit that used more energy than the highest one "saves" a negative amount.
        energy_saved_j=f.opt_number("energy_saved_j", minimum=None),
        baseline_estimated=bool(f.opt_bool("baseline_estimated")),
        reused_run_id=reused.opt_text("run_id") if reused is not None else None,
        reused_chosen_at_s=(reused.timestamp("chosen_at")[1] if reused is not None
                            and reused.raw.get("chosen_at") is not None else None),
        tuning=TuningSummary(
            finished=bool(tuning.opt_bool("finished")),
            profiled=tuple(tuning.numbers("profiled")),
            reason=tuning.opt_text("reason"),
            steps_at_chosen=tuning.opt_int("steps_at_chosen"),
        ) if tuning is not None else None,
    )


def read_power_csv(path: Path) -> tuple[DeviceTrace, ...]:
    """Read `timestamp,device,power_w` rows into one time-sorted trace per device (duplicates dropped)."""
    by_device: dict[str, tuple[list[float], list[float]]] = {}
    for line, row in _csv_rows(path, POWER_COLUMNS):
        device = row["device"]
        if not device:
            raise UsageError(f"{path} line {line}: device is empty; {_FIX}")
        times, powers = by_device.setdefault(device, ([], []))
        times.append(_cell(path, line, "timestamp", row["timestamp"], minimum=None))
        powers.append(_cell(path, line, "power_w", row["power_w"]))
    traces = []
    for device, (times, powers) in sorted(by_device.items()):
        t = np.array(times, dtype=np.float64)
        p = np.array(powers, dtype=np.float64)
        order = np.argsort(t, kind="stable")
        unique_t, first = np.unique(t[order], return_index=True)
        traces.append(DeviceTrace(device, unique_t, p[order][first]))
    return tuple(traces)


def read_windows_csv(path: Path) -> Iterator[WindowRow]:
    """The rows of a window log (`windows.csv` or `windows-rankN.csv`), validated one by one."""
    for line, row in _csv_rows(path, WINDOW_COLUMNS):
        per_device = {name[: -len("_energy_j")]: _cell(path, line, name, value)
                      for name, value in row.items() if name.endswith("_energy_j") and name != "energy_j"}
        simulated = row["simulated"]
        if simulated not in ("true", "false"):
            raise UsageError(f"{path} line {line}: simulated must be true or false (got {_show(simulated)}); {_FIX}")
        yield WindowRow(
            start_time=_cell(path, line, "start_time", row["start_time"], minimum=None),
            window_name=row["window_name"],
            time_s=_cell(path, line, "time_s", row["time_s"]),
            energy_j=_cell(path, line, "energy_j", row["energy_j"]),
            energy_per_device_j=per_device,
            approximate=tuple(k for k in row["approximate"].split(";") if k),
            simulated=simulated == "true",
        )


def _cell(path: Path, line: int, column: str, text: str, *, minimum: float | None = 0.0) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and abs(value) > MAX_FIGURE:
        raise UsageError(f"{path} line {line}: {column} must be at most {MAX_FIGURE:g} in size (got {_show(text)}); "
                         f"{_FIX}")
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise UsageError(f"{path} line {line}: {column} must be a finite number{bound} (got {_show(text)}); {_FIX}")
    return value


def _check_file(path: Path, *, missing: str) -> None:
    """Raise a UsageError unless `path` is a regular file (a link to one is fine)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UsageError(missing) from None
    except OSError as err:
        raise UsageError(f"{path}: cannot be read ({err.strerror}); check its permissions") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"{path} is a directory where a file is expected; {_FIX}")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path} is not a regular file; {_FIX}")


def _read_text(path: Path, *, missing: str) -> str:
    _check_file(path, missing=missing)
    return read_text(path, what=str(path), expected="text", fix=_FIX)


def _csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column) of a CSV file that must have `columns`; whole rows only."""
    _check_file(path, missing=f"{path} not found (a broken link?); {_FIX}")
    try:
        handle = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed below
    except OSError as err:
        raise UsageError(f"{path}: cannot be read ({err.strerror}); check its permissions") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                raise UsageError(f"{path}: empty; the header must include {','.join(columns)}; {_FIX}")
            _no_nul(path, reader.line_num, header)
            missing = [c for c in columns if c not in header]
            if missing:
                raise UsageError(f"{path}: the header lacks column(s) {','.join(missing)} "
                                 f"(it must include {','.join(columns)}); {_FIX}")
            for row in reader:
                if not row:
                    continue
                _no_nul(path, reader.line_num, row)
                if len(row) != len(header):
                    cut = "the row is cut short" if len(row) < len(header) else "the row is too long"
                    raise UsageError(f"{path} line {reader.line_num}: {len(row)} fields where the header has "
                                     f"{len(header)} ({cut}); {_FIX}")
                yield reader.line_num, dict(zip(header, row, strict=True))
        except UnicodeDecodeError:
            raise UsageError(f"{path}: not UTF-8 text; {_FIX}") from None
        except csv.Error as err:
            raise UsageError(f"{path} line {reader.line_num}: not valid CSV ({err}); {_FIX}") from None


def _no_nul(path: Path, line: int, cells: list[str]) -> None:
    if any("\x00" in c for c in cells):
        raise UsageError(f"{path} line {line}: holds binary data (a NUL byte), not text; {_FIX}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Fields:
    """Typed access to one JSON object of a summary; every error names the file and the field."""

    def __init__(self, raw: Mapping[str, Any], where: str, prefix: str = "") -> None:
        self.raw, self.where, self.prefix = raw, where, prefix

    def _fail(self, key: str, expected: str, value: Any) -> NoReturn:
        raise UsageError(f"{self.where}: {self.prefix}{key} must be {expected} (got {_show(value)}); {_FIX}")

    def _required(self, key: str) -> Any:
        value = self.raw.get(key)
        if value is None:
            raise UsageError(f"{self.where}: key {self.prefix + key!r} is missing; {_FIX}")
        return value

    def number(self, key: str, *, minimum: float | None = 0.0) -> float:
        value = self._required(key)
        # An int is finite, however large (math.isfinite would overflow on 10**400).
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not (isinstance(value, int) or math.isfinite(value)) or (minimum is not None and value < minimum):
            self._fail(key, "a finite number" + (f" >= {minimum:g}" if minimum is not None else ""), value)
        if abs(value) > MAX_FIGURE:
            self._fail(key, f"at most {MAX_FIGURE:g} in size", value)
        return float(value)

    def opt_number(self, key: str, *, minimum: float | None = 0.0) -> float | None:
        return None if self.raw.get(key) is None else self.number(key, minimum=minimum)

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._fail(key, f"a whole number >= {minimum}", value)
        if value > MAX_FIGURE:
            self._fail(key, f"at most {MAX_FIGURE:g}", value)
        return value

    def text(self, key: str) -> str:
        value = self._required(key)
        if not isinstance(value, str):
            self._fail(key, "a string", value)
        return value

    def opt_text(self, key: str) -> str | None:
        return None if self.raw.get(key) is None else self.text(key)

    def opt_bool(self, key: str) -> bool | None:
        value = self.raw.get(key)
        if value is not None and not isinstance(value, bool):
            self._fail(key, "true or false", value)
        return value

    def scalar(self, key: str) -> SettingValue:
        value = self.raw.get(key)
        if (isinstance(value, float) and not math.isfinite(value)) or isinstance(value, list | Mapping):
            self._fail(key, "a finite number, a string, true, false or null", value)
        return value

    def timestamp(self, key: str) -> tuple[str, float]:
        text = self.text(key)
        return text, parse_timestamp_s(text, where=f"{self.where}: {self.prefix}{key}")

    def opt_object(self, key: str) -> _Fields | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self._fail(key, "an object", value)
        return _Fields(value, self.where, f"{self.prefix}{key}.")

    def _list(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self._fail(key, "a list", value)
        return value

    def objects(self, key: str) -> list[_Fields]:
        items = []
        for i, value in enumerate(self._list(key)):
            if not isinstance(value, Mapping):
                self._fail(f"{key}[{i}]", "an object", value)
            items.append(_Fields(value, self.where, f"{self.prefix}{key}[{i}]."))
        return items

    def numbers(self, key: str) -> list[float]:
        values = self._list(key)
        for i, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int | float) or abs(value) > MAX_FIGURE \
                    or not math.isfinite(value):
                self._fail(f"{key}[{i}]", f"a finite number of at most {MAX_FIGURE:g} in size", value)
        return [float(v) for v in values]

    def strings(self, key: str) -> tuple[str, ...]:
        values = self._list(key)
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self._fail(f"{key}[{i}]", "a string", value)
        return tuple(values)

    def number_map(self, key: str) -> dict[str, float]:
        nested = self.opt_object(key)
        return {} if nested is None else {k: nested.number(k) for k in nested.raw}
