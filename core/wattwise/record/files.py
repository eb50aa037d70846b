"""The run's files: windows.csv and power.csv rows, writing and reading a run directory."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

import numpy as np

from wattwise.carbon.integrate import DeviceTrace
from wattwise.codec import (
    FIX,
    MAX_FIGURE,
    JsonObject,
    from_json,
    show,
)
from wattwise.codec import iso_utc as iso_utc  # re-exported: the record's time format
from wattwise.errors import UsageError
from wattwise.record.summary import (
    LATE_FILE,
    POWER_COLUMNS,
    POWER_FILE,
    SUMMARY_FILE,
    WINDOW_COLUMNS,
    WINDOW_LATER_COLUMNS,
    WINDOWS_FILE,
    RankNote,
    RunSummary,
    parse_summary,
    with_rank_notes,
)
from wattwise.safe_files import UntrustedFile, create_beside, read_text, read_trusted_json, replace_file
from wattwise.vocabulary import RankNoteKind

# -- windows.csv and power.csv rows --------------------------------------------------------------------
#: The window of a pause of training (validation, a checkpoint; `wattwise.run.measurement.Window.PAUSE`):
#: `paused:<kind>` while open, `paused` in windows.csv with its kind beside it.
PAUSE_WINDOW = "paused"


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
    #: How precisely `energy_j` is known (J); None in a file written before windows.csv said.
    energy_uncertainty_j: float | None = None
    #: What a pause (`paused`) was: validation, checkpoint, ...; None for other windows, and in a file written
    #: before windows.csv said.
    kind: str | None = None


@dataclass(frozen=True)
class PowerRow:
    """One power sample of one device."""

    timestamp_s: float
    device: str
    power_w: float


def windows_header(device_keys: Sequence[str]) -> list[str]:
    """The columns of `windows.csv`: one energy column per device (`<key>_energy_j`) after the fixed four.

    The columns added since (`WINDOW_LATER_COLUMNS`) come last.
    """
    first, last = WINDOW_COLUMNS[:4], WINDOW_COLUMNS[4:]
    return [*first, *(f"{k}_energy_j" for k in device_keys), *last, *WINDOW_LATER_COLUMNS]


def window_cells(row: WindowRow, device_keys: Sequence[str]) -> list[str]:
    """The cells of one `windows.csv` line, in the columns of `windows_header(device_keys)`."""
    return [
        f"{row.start_time:.6f}",
        row.window_name,
        f"{row.time_s:.6f}",
        f"{row.energy_j:.6f}",
        *(f"{row.energy_per_device_j[k]:.6f}" for k in device_keys),
        ";".join(row.approximate),
        str(row.simulated).lower(),
        "" if row.energy_uncertainty_j is None else f"{row.energy_uncertainty_j:.6f}",
        row.kind or "",
    ]


def power_rows(samples: Iterable[tuple[float, Mapping[str, float]]]) -> list[PowerRow]:
    """Samples `(unix time, {device: watts})`, in time order (stable), as power.csv rows."""
    ordered = sorted(samples, key=lambda s: s[0])
    return [PowerRow(t_s, device, watts) for t_s, by_device in ordered for device, watts in by_device.items()]


# -- writing -------------------------------------------------------------------------------------------
def write_run_dir(
    out_dir: str | os.PathLike[str], summary: RunSummary, power: Iterable[PowerRow] | None = None
) -> Path:
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
        writer.writerows(
            (f"{r.timestamp_s:.3f}", r.device, f"{r.power_w:.3f}")
            for r in rows
            if math.isfinite(r.timestamp_s) and math.isfinite(r.power_w)
        )

    replace_file(path, write)


class EndedWindow(Protocol):
    """What a window log writes of an ended measurement window (`wattwise.monitor.Measurement` has it)."""

    @property
    def start_time(self) -> float:
        """When the window began (unix s)."""
        ...

    @property
    def name(self) -> str:
        """The window's name."""
        ...

    @property
    def time_s(self) -> float:
        """How long it lasted."""
        ...

    @property
    def energy_j(self) -> Mapping[str, float]:
        """Joules by device key."""
        ...

    @property
    def approximate(self) -> tuple[str, ...]:
        """Device keys whose energy is power x time."""
        ...

    @property
    def simulated(self) -> bool:
        """Whether a device is simulated."""
        ...

    @property
    def total_energy_j(self) -> float:
        """Energy of every device together."""
        ...

    @property
    def total_energy_uncertainty_j(self) -> float:
        """How precisely `total_energy_j` is known (J)."""
        ...


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

    def window_ended(self, m: EndedWindow) -> None:
        """A monitor's window ended (`wattwise.monitor.WindowSink`): its line.

        A pause's window (`paused:<kind>`) is logged as `paused`, its kind in the `kind` column; any other
        name, a colon in it or not, as it is.
        """
        name, _, kind = m.name.partition(":")
        if name != PAUSE_WINDOW:
            name, kind = m.name, ""
        self.write(
            WindowRow(
                m.start_time,
                name,
                m.time_s,
                m.total_energy_j,
                m.energy_j,
                m.approximate,
                m.simulated,
                m.total_energy_uncertainty_j,
                kind or None,
            )
        )

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
        raise UsageError(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); {FIX}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{path}: not valid JSON ({type(err).__name__}); {FIX}") from None
    return merge_late_notes(parse_summary(raw, where=str(path)), path.parent)


#: A process's late note is one small object.
MAX_LATE_NOTE_BYTES = 64 * 1024


def merge_late_notes(summary: RunSummary, folder: Path) -> RunSummary:
    """`summary` with the notes of its processes whose figures came after it was written.

    Such a process leaves its own note beside the summary (`LATE_FILE`, `wattwise.record.kept.leave_late_note`)
    instead of rewriting the main process's file; only a process the summary says left no figures is read,
    and a note that cannot be trusted or read is no note.
    """
    late: list[RankNote] = []
    for rank in sorted({n.rank for n in summary.rank_notes if n.kind == RankNoteKind.NO_FIGURES}):
        path = folder / LATE_FILE.format(rank=rank)
        try:
            note = from_json(RankNote, JsonObject(read_trusted_json(path, max_bytes=MAX_LATE_NOTE_BYTES), str(path)))
        except (OSError, UntrustedFile, ValueError, UsageError):
            continue
        if note.kind == RankNoteKind.LATE and note.rank == rank:
            late.append(note)
    return with_rank_notes(summary, [*summary.rank_notes, *late]) if late else summary


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
        per_device = {
            name[: -len("_energy_j")]: _cell(path, line, name, value)
            for name, value in row.items()
            if name.endswith("_energy_j") and name != "energy_j"
        }
        uncertainty = row.get("energy_uncertainty_j") or None  # absent, or empty: the file does not say
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
            energy_uncertainty_j=None
            if uncertainty is None
            else _cell(path, line, "energy_uncertainty_j", uncertainty),
            kind=row.get("kind") or None,
        )


def _cell(path: Path, line: int, column: str, text: str, *, minimum: float | None = 0.0) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and abs(value) > MAX_FIGURE:
        raise UsageError(
            f"{path} line {line}: {column} must be at most {MAX_FIGURE:g} in size (got {show(text)}); {FIX}"
        )
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
                raise UsageError(
                    f"{path}: the header lacks column(s) {','.join(missing)} "
                    f"(it must include {','.join(columns)}); {FIX}"
                )
            for row in reader:
                if not row:
                    continue
                _no_nul(path, reader.line_num, row)
                if len(row) != len(header):
                    cut = "the row is cut short" if len(row) < len(header) else "the row is too long"
                    raise UsageError(
                        f"{path} line {reader.line_num}: {len(row)} fields where the header has "
                        f"{len(header)} ({cut}); {FIX}"
                    )
                yield reader.line_num, dict(zip(header, row, strict=True))
        except UnicodeDecodeError:
            raise UsageError(f"{path}: not UTF-8 text; {FIX}") from None
        except csv.Error as err:
            raise UsageError(f"{path} line {reader.line_num}: not valid CSV ({err}); {FIX}") from None


def _no_nul(path: Path, line: int, cells: list[str]) -> None:
    if any("\x00" in c for c in cells):
        raise UsageError(f"{path} line {line}: holds binary data (a NUL byte), not text; {FIX}")
