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
import dataclasses
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from wattwise import __version__
from wattwise.carbon.integrate import J_PER_KWH, DeviceTrace
from wattwise.carbon.series import parse_timestamp_s
from wattwise.errors import UsageError
from wattwise.paths import create_beside, finite_or_null, read_text, replace_file
from wattwise.power_limit import ProfileEntry
from wattwise.record_fields import (
    AT_INDEX,
    FIX,
    MAX_FIGURE,
    FieldSpec,
    Flag,
    JsonObject,
    Number,
    NumberMap,
    Numbers,
    OpenObjects,
    Record,
    RecordMap,
    Records,
    Scalar,
    Text,
    Texts,
    Timestamp,
    UnixTime,
    Whole,
    as_json,
    define_foreign,
    from_json,
    show,
    to_json_dict,
)
from wattwise.record_fields import iso_utc as iso_utc  # re-exported: the record's time format

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

# -- summary.json --------------------------------------------------------------------------------------
# Each field is defined once, with its JSON key and codec (`wattwise.record_fields`): `to_dict` and
# `parse_summary` follow from the definitions, in the fields' order (the order `summary.json` holds them).
class _JsonRecord:
    """A record whose JSON object follows from its `json_field`s."""

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object, keys in the order a reader expects them."""
        return to_json_dict(self)


define_foreign(ProfileEntry, power_limit_w=FieldSpec(Number(), required=True),
               time_s=FieldSpec(Number(), required=True), energy_j=FieldSpec(Number(), required=True))


@dataclass(frozen=True)
class EpochEnergy(_JsonRecord):
    """Time and energy of one epoch (an epoch missing its number reads as its position in the list)."""

    epoch: int = field(metadata=as_json(Whole(), if_missing=AT_INDEX))
    time_s: float = field(metadata=as_json(Number(), required=True))
    energy_j: float = field(metadata=as_json(Number(), required=True))


@dataclass(frozen=True)
class SettingEvent(_JsonRecord):
    """A device setting applied during the run (e.g. `power_limit_w` = 175 on `rank0/gpu0`)."""

    timestamp_s: float = field(metadata=as_json(Number(minimum=None), key="timestamp", required=True))
    device: str = field(metadata=as_json(Text(), required=True))
    setting: str = field(metadata=as_json(Text(), required=True))
    value: SettingValue = field(metadata=as_json(Scalar()))


@dataclass(frozen=True)
class TuningSummary(_JsonRecord):
    """Whether power-limit tuning profiled every limit; when not, why, and what it measured."""

    finished: bool = field(metadata=as_json(Flag(), if_missing=False))
    #: The limits profiled, highest first.
    profiled: tuple[float, ...] = field(default=(), metadata=as_json(Numbers()))
    reason: str | None = field(default=None, metadata=as_json(Text()))
    #: Optimizer steps run at the chosen limit (the estimated saving counts these).
    steps_at_chosen: int | None = field(default=None, metadata=as_json(Whole()))


@dataclass(frozen=True)
class NonTrainingTime(_JsonRecord):
    """Time that was not training (one kind: validation, checkpoint, ...), excluded from step figures."""

    time_s: float = field(metadata=as_json(Number(), required=True))
    energy_j: float = field(metadata=as_json(Number(), required=True))
    count: int = field(metadata=as_json(Whole(), if_missing=0))


def _tuned(limit: PowerLimitSummary) -> bool:
    return limit.mode != "cap"


def _estimated(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.baseline_estimated


def _reused(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.reused


def _has_tuning(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.tuning is not None


@dataclass(frozen=True, kw_only=True)
class PowerLimitSummary(_JsonRecord):
    """What the power-limit part did: a cap, or tuning (profile, choice, estimated saving).

    A cap records only its mode and limit.
    """

    #: "cap" or "tune".
    mode: str = field(metadata=as_json(Text(), required=True))
    selector: str | None = field(default=None, metadata=as_json(Text(), written=_tuned))
    eta: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    max_slowdown: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    #: The choice came from the limits memory of an earlier run, without profiling.
    reused: bool = field(default=False, metadata=as_json(Flag(), written=_tuned))
    chosen_power_limit_w: float | None = field(default=None, metadata=as_json(Number()))
    profile: tuple[ProfileEntry, ...] = field(default=(), metadata=as_json(Records(ProfileEntry), written=_tuned))
    #: Energy the run would have used at the highest limit, and the difference (None until chosen). A limit
    #: that used more energy than the highest one "saves" a negative amount.
    baseline_energy_j: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    energy_saved_j: float | None = field(default=None, metadata=as_json(Number(minimum=None), written=_tuned))
    baseline_estimated: bool = field(default=False, metadata=as_json(Flag(), written=_estimated))
    #: A reused limit: the run that chose it and when (unix seconds); `selector` and `eta` are that run's.
    reused_run_id: str | None = field(default=None,
                                      metadata=as_json(Text(), key="reused_from.run_id", written=_reused))
    reused_chosen_at_s: float | None = field(default=None,
                                             metadata=as_json(UnixTime(), key="reused_from.chosen_at", written=_reused))
    #: Whether tuning finished (None in summaries of earlier wattwise versions, which did not say).
    tuning: TuningSummary | None = field(default=None, metadata=as_json(Record(TuningSummary), written=_has_tuning))


@dataclass(frozen=True)
class RunSettings(_JsonRecord):
    """The settings the run ended with."""

    power_limit_w: float | None = field(default=None, metadata=as_json(Number()))
    batch_size: int | None = field(default=None, metadata=as_json(Whole(minimum=1)))
    #: Path of the PLAN.json (`wattwise.frequency`) the run followed; None when it followed none.
    frequency_plan: str | None = field(default=None, metadata=as_json(Text()))


@dataclass(frozen=True)
class CarbonAwareSummary(_JsonRecord):
    """The carbon-aware power limit's inputs (present when the run switched limits by grid intensity)."""

    threshold_g_per_kwh: float = field(metadata=as_json(Number(), required=True))
    interval_s: float = field(metadata=as_json(Number(), required=True))
    intensity_source: str | None = field(default=None, metadata=as_json(Text()))


@dataclass(frozen=True, kw_only=True)
class RunSummary(_JsonRecord):
    """`summary.json`: the whole run, energy summed and time maxed over processes.

    Times are ISO 8601 with a timezone (`iso_utc`); `avg_power_w` is derived from energy and time and
    written after `cpu_energy_j`. Keys that older or hand-made summaries lack read as None (or empty),
    except those the report cannot do without (start and end time, energy).
    """

    schema: str = field(default=SCHEMA, metadata=as_json(Text()))
    #: None when read from a summary that does not say.
    wattwise_version: str | None = field(default=__version__, metadata=as_json(Text(), if_missing=None))
    #: "completed", "failed", "interrupted", ...
    status: str | None = field(default=None, metadata=as_json(Text()))
    #: When a summary does not say, whether its backend is "simulated".
    simulated: bool = field(default=False, metadata=as_json(Flag(), if_missing=None))
    backend: str | None = field(default=None, metadata=as_json(Text()))
    framework: str | None = field(default=None, metadata=as_json(Text()))
    job: str | None = field(default=None, metadata=as_json(Text()))
    hostname: str | None = field(default=None, metadata=as_json(Text()))
    world_size: int | None = field(default=None, metadata=as_json(Whole(minimum=1)))
    start_time: str = field(metadata=as_json(Timestamp(), required=True))
    end_time: str = field(metadata=as_json(Timestamp(), required=True))
    #: When a summary does not say, the time from start to end.
    time_s: float = field(metadata=as_json(Number()))
    energy_j: float = field(metadata=as_json(Number(), required=True))
    energy_per_device_j: Mapping[str, float] = field(default_factory=dict, metadata=as_json(NumberMap()))
    cpu_energy_j: float | None = field(default=None, metadata=as_json(Number()))
    steps: int | None = field(default=None, metadata=as_json(Whole()))
    epochs: tuple[EpochEnergy, ...] = field(default=(), metadata=as_json(Records(EpochEnergy)))
    #: Energy of the segments before a resume from a checkpoint (included in `energy_j`).
    resumed_energy_j: float = field(default=0.0, metadata=as_json(Number()))
    #: Each GPU as `Device.describe()` reports it, plus its `rank`: open-ended.
    devices: tuple[Mapping[str, Any], ...] = field(default=(), metadata=as_json(OpenObjects()))
    notes: tuple[str, ...] = field(default=(), metadata=as_json(Texts()))
    power_limit: PowerLimitSummary | None = field(default=None, metadata=as_json(Record(PowerLimitSummary)))
    settings: RunSettings = field(default_factory=RunSettings, metadata=as_json(Record(RunSettings)))
    settings_timeline: tuple[SettingEvent, ...] = field(default=(), metadata=as_json(Records(SettingEvent)))
    carbon_aware: CarbonAwareSummary | None = field(default=None, metadata=as_json(Record(CarbonAwareSummary)))
    #: Time that was not training (validation, checkpoints), by kind; included in `time_s`/`energy_j`.
    non_training: Mapping[str, NonTrainingTime] = field(default_factory=dict,
                                                        metadata=as_json(RecordMap(NonTrainingTime)))

    @property
    def avg_power_w(self) -> float:
        """The run's average power (W): its energy over its time; 0 for a run that took no time."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def start_s(self) -> float:
        """`start_time` as unix seconds.

        Raises:
            UsageError: it is not an ISO 8601 time with a timezone (a summary built in code, never validated).
        """
        return parse_timestamp_s(self.start_time, where="start_time")

    @property
    def end_s(self) -> float:
        """`end_time` as unix seconds; a `UsageError` as for `start_s`."""
        return parse_timestamp_s(self.end_time, where="end_time")

    @property
    def device_names(self) -> tuple[str, ...]:
        """Model name of each device (`devices[].name`), when the run recorded it."""
        return tuple(d["name"] for d in self.devices if isinstance(d.get("name"), str) and d["name"])

    def json_derived(self) -> dict[str, tuple[str, Any]]:
        """`avg_power_w`, derived from energy and time, is written after `cpu_energy_j`."""
        return {"cpu_energy_j": ("avg_power_w", self.avg_power_w)}

    def to_json(self) -> str:
        """`summary.json`'s text: valid JSON, a figure that is not finite written as null."""
        return json.dumps(finite_or_null(self.to_dict()), indent=2, allow_nan=False) + "\n"


#: Why a tuned limit was never applied (`never_applied`).
NEVER_APPLIED = "the run ended as tuning finished, so no step ran at it (give the run more steps)"


def never_applied(limit: PowerLimitSummary) -> bool:
    """Tuning chose a limit in this run, but no optimizer step ran at it (`tuning.steps_at_chosen` 0)."""
    return (limit.mode != "cap" and not limit.reused and limit.chosen_power_limit_w is not None
            and limit.tuning is not None and limit.tuning.steps_at_chosen == 0)


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
            if never_applied(pl):
                lines.append(f"  the chosen limit was never applied: {NEVER_APPLIED}")
            elif pl.energy_saved_j is not None:
                lines.append(f"  estimated saving against the maximum limit: {pl.energy_saved_j:.1f} J")
    if pl is not None and pl.tuning is not None and not pl.tuning.finished:
        what = "did not finish" if pl.chosen_power_limit_w is not None or pl.mode == "cap" else "chose no limit"
        lines.append(f"  tuning {what}: {pl.tuning.reason}")
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
    """The columns of `windows.csv`: one energy column per device (`<key>_energy_j`) after the fixed four."""
    first, last = WINDOW_COLUMNS[:4], WINDOW_COLUMNS[4:]
    return [*first, *(f"{k}_energy_j" for k in device_keys), *last]


def window_cells(row: WindowRow, device_keys: Sequence[str]) -> list[str]:
    """The cells of one `windows.csv` line, in the columns of `windows_header(device_keys)`."""
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
        # A temporary an earlier run could not finish (its disk was full) is removed at this start.
        for stale in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()
        fd, tmp = create_beside(self.path)
        self._file: TextIO | None = os.fdopen(fd, "w", encoding="utf-8", newline="", buffering=1)
        self._writer = csv.writer(self._file, lineterminator="\n")
        try:
            self._writer.writerow(windows_header(self.device_keys))
            os.replace(tmp, self.path)  # a new, empty log replaces the last run's (or a planted link)
        except BaseException:
            with contextlib.suppress(OSError):  # closing flushes: on a full disk that fails too
                self.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def write(self, row: WindowRow) -> None:
        """Append one window's line (nothing once the log is closed)."""
        if self._file is not None:
            self._writer.writerow(window_cells(row, self.device_keys))

    def close(self) -> None:
        """Close the file; a second close, or a write after it, does nothing."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()


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
    """Read and validate one `summary.json` (see `parse_summary`).

    Raises:
        UsageError: it is missing, unreadable, not JSON or not a run summary, naming the file and the field.
    """
    data = _read_text(path, missing=f"{path} not found; pass the directory a wattwise run wrote (RUN_DIR)")
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); {FIX}") \
            from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{path}: not valid JSON ({type(err).__name__}); {FIX}") from None
    return parse_summary(raw, where=str(path))


def parse_summary(raw: Any, *, where: str) -> RunSummary:
    """Validate a summary's JSON object; `where` (the file) starts every error message.

    Each field is validated as its definition says (see `RunSummary`); then what spans fields: the schema,
    the end not before the start, and the values a summary may leave out that follow from others.

    Raises:
        UsageError: The object is not a wattwise run summary or a field is damaged (one line naming the
            file, the field and the fix).
    """
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: must hold a JSON object (a wattwise run summary); {FIX}")
    f = JsonObject(raw, where)
    schema = f.opt_text("schema")
    if schema is not None and not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(f"{where}: schema {schema!r} is not a wattwise run summary ({SCHEMA_PREFIX}N); "
                         "pass the summary.json of a wattwise run")
    f.opt_number("avg_power_w")  # derived from energy and time; checked, not kept
    summary = from_json(RunSummary, f)
    start_s, end_s = summary.start_s, summary.end_s
    if end_s < start_s:
        raise UsageError(f"{where}: end_time {summary.end_time!r} is before start_time {summary.start_time!r}; "
                         f"{FIX}")
    return dataclasses.replace(
        summary,
        simulated=summary.simulated if summary.simulated is not None else summary.backend == "simulated",
        time_s=summary.time_s if summary.time_s is not None else end_s - start_s,
    )


def read_power_csv(path: Path) -> tuple[DeviceTrace, ...]:
    """Read `timestamp,device,power_w` rows into one time-sorted trace per device (duplicates dropped)."""
    by_device: dict[str, tuple[list[float], list[float]]] = {}
    for line, row in _csv_rows(path, POWER_COLUMNS):
        device = row["device"]
        if not device:
            raise UsageError(f"{path} line {line}: device is empty; {FIX}")
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
            raise UsageError(f"{path} line {line}: simulated must be true or false (got {show(simulated)}); {FIX}")
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
        raise UsageError(f"{path} line {line}: {column} must be at most {MAX_FIGURE:g} in size (got {show(text)}); "
                         f"{FIX}")
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        raise UsageError(f"{path} line {line}: {column} must be a finite number{bound} (got {show(text)}); {FIX}")
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
        raise UsageError(f"{path} is a directory where a file is expected; {FIX}")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{path} is not a regular file; {FIX}")


def _read_text(path: Path, *, missing: str) -> str:
    _check_file(path, missing=missing)
    return read_text(path, what=str(path), expected="text", fix=FIX)


def _csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row by column) of a CSV file that must have `columns`; whole rows only."""
    _check_file(path, missing=f"{path} not found (a broken link?); {FIX}")
    try:
        handle = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed below
    except OSError as err:
        raise UsageError(f"{path}: cannot be read ({err.strerror}); check its permissions") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                raise UsageError(f"{path}: empty; the header must include {','.join(columns)}; {FIX}")
            _no_nul(path, reader.line_num, header)
            missing = [c for c in columns if c not in header]
            if missing:
                raise UsageError(f"{path}: the header lacks column(s) {','.join(missing)} "
                                 f"(it must include {','.join(columns)}); {FIX}")
            for row in reader:
                if not row:
                    continue
                _no_nul(path, reader.line_num, row)
                if len(row) != len(header):
                    cut = "the row is cut short" if len(row) < len(header) else "the row is too long"
                    raise UsageError(f"{path} line {reader.line_num}: {len(row)} fields where the header has "
                                     f"{len(header)} ({cut}); {FIX}")
                yield reader.line_num, dict(zip(header, row, strict=True))
        except UnicodeDecodeError:
            raise UsageError(f"{path}: not UTF-8 text; {FIX}") from None
        except csv.Error as err:
            raise UsageError(f"{path} line {reader.line_num}: not valid CSV ({err}); {FIX}") from None


def _no_nul(path: Path, line: int, cells: list[str]) -> None:
    if any("\x00" in c for c in cells):
        raise UsageError(f"{path} line {line}: holds binary data (a NUL byte), not text; {FIX}")
