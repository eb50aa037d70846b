"""`wattwise.track`: the energy of any stretch of code in three lines, one CSV row a run.

    import wattwise

    with wattwise.track("train"):
        train()

or `@wattwise.track("train")` on a function (each call is measured). At the end of each, one row is
appended to `wattwise_energy.csv` in the working directory (`csv=` names another file, `csv=None` writes
none): when it started, the project (`wattwise.project`), the name, its time, its energy with the
uncertainty the counters resolve, in J and kWh, its average power, its devices, and whether its figures
are simulated. The file is what a spreadsheet opens, one run a row, as CodeCarbon's `emissions.csv`; a
row is written under a lock, so processes sharing the file never interleave. The tracker's `measurement`
(a `wattwise.monitor.Measurement`) holds the figures; `energy_j` and `time_s` are its totals.

It measures what `discover(backend)` finds (the GPUs, or the CPU package through RAPL; "simulated": the
simulated GPU). Measuring never breaks the code it measures: with nothing to measure, or a device that
fails, it times the code, warns once (`EnergyPluginWarning`), and its row says no energy was measured.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import TextIO

from wattwise.carbon.integrate import J_PER_KWH
from wattwise.errors import plugin_warning
from wattwise.monitor import EnergyMonitor, Measurement
from wattwise.project import project_of

#: The file each run appends its row to, in the working directory, unless `csv=` says otherwise.
DEFAULT_CSV = "wattwise_energy.csv"
#: The CSV's columns (a contract: extended at the end, never renamed or dropped).
COLUMNS = (
    "start_time",
    "project",
    "name",
    "time_s",
    "energy_j",
    "energy_uncertainty_j",
    "energy_kwh",
    "avg_power_w",
    "devices",
    "simulated",
)


@dataclass(frozen=True)
class TrackedRow:
    """One run's row of the CSV (`COLUMNS`); energy fields are None when nothing was measured."""

    start_time: str
    project: str
    name: str
    time_s: float
    energy_j: float | None
    energy_uncertainty_j: float | None
    devices: tuple[str, ...]
    simulated: bool

    def cells(self) -> list[str]:
        """The row's cells, in `COLUMNS` order (empty where nothing was measured)."""
        joules = self.energy_j
        return [
            self.start_time,
            self.project,
            self.name,
            f"{self.time_s:.6g}",
            "" if joules is None else f"{joules:.6g}",
            "" if self.energy_uncertainty_j is None else f"{self.energy_uncertainty_j:.3g}",
            "" if joules is None else f"{joules / J_PER_KWH:.6g}",
            "" if joules is None or self.time_s <= 0 else f"{joules / self.time_s:.6g}",
            " ".join(self.devices),
            "true" if self.simulated else "false",
        ]


def append_row(path: str | os.PathLike[str], row: TrackedRow) -> None:
    """Append `row` to the CSV at `path` (its header first when the file is new or empty), under a lock."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    with open(path, "a", encoding="utf-8", newline="") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if fh.tell() == 0:
                writer.writerow(COLUMNS)
            writer.writerow(row.cells())
            fh.write(buffer.getvalue())
            fh.flush()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Tracker(contextlib.ContextDecorator):
    """Measures the code it wraps (a `with` block, or each call of a decorated function). See the module docstring.

    Args:
        name: What is measured, the CSV's `name` column (default "run").
        project: The CSV's `project` column (None: the working directory's git root's or folder's name).
        backend: Which devices to measure (`wattwise.devices.discover`): "auto", "nvml", "simulated", ...
        csv: The CSV a row is appended to at each end (None: no file).
        print_result: Print one line with the figures at each end (on stderr).
    """

    def __init__(
        self,
        name: str = "run",
        *,
        project: str | None = None,
        backend: str = "auto",
        csv: str | os.PathLike[str] | None = DEFAULT_CSV,
        print_result: bool = False,
    ) -> None:
        self.name = name
        self.project = project
        self.backend = backend
        self.csv_path = Path(csv) if csv is not None else None
        self.print_result = print_result
        #: The last run's figures (None before the first ends, or when nothing could be measured).
        self.measurement: Measurement | None = None
        #: The last run's row of the CSV.
        self.row: TrackedRow | None = None
        self._monitor: EnergyMonitor | None = None
        self._started: datetime | None = None
        self._time_started_s = 0.0

    @property
    def energy_j(self) -> float | None:
        """The last run's energy (J, every device), None when nothing was measured."""
        return self.measurement.total_energy_j if self.measurement is not None else None

    @property
    def time_s(self) -> float | None:
        """The last run's wall time (s)."""
        return self.row.time_s if self.row is not None else None

    def __enter__(self) -> Tracker:
        self.measurement = None
        self._started = datetime.now(timezone.utc)
        self._time_started_s = time.perf_counter()
        try:
            from wattwise.devices import discover

            found = discover(self.backend)
            if found.all:
                self._monitor = EnergyMonitor(found.all)
                self._monitor.begin_window(self.name)
            else:
                plugin_warning(f"wattwise.track: {found.notes[-1] if found.notes else 'nothing to measure'}")
        except Exception as err:  # measuring never breaks the code it measures
            self._monitor = None
            plugin_warning(f"wattwise.track: energy measurement failed ({err}); {self.name!r} is only timed")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        time_s = time.perf_counter() - self._time_started_s
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            try:
                self.measurement = monitor.end_window(self.name)
                time_s = self.measurement.time_s
            except Exception as err:
                plugin_warning(f"wattwise.track: energy measurement failed ({err}); {self.name!r} is only timed")
            finally:
                monitor.close()
        m = self.measurement
        started = self._started or datetime.now(timezone.utc)
        self.row = TrackedRow(
            start_time=started.isoformat(timespec="seconds"),
            project=project_of(self.project),
            name=self.name,
            time_s=time_s,
            energy_j=m.total_energy_j if m is not None else None,
            energy_uncertainty_j=m.total_energy_uncertainty_j if m is not None and m.energy_uncertainty_j else None,
            devices=tuple(m.energy_j) if m is not None else (),
            simulated=bool(m is not None and m.simulated),
        )
        if self.print_result:
            self._print(self.row, m)
        if self.csv_path is not None:
            try:
                append_row(self.csv_path, self.row)
            except OSError as err:
                plugin_warning(f"wattwise.track: could not append to {self.csv_path} ({err})")

    @staticmethod
    def _print(row: TrackedRow, m: Measurement | None, out: TextIO | None = None) -> None:
        what = str(m) if m is not None else f"{row.name}: {row.time_s:.3f} s, no energy measured"
        print(f"wattwise{' [SIMULATED]' if row.simulated else ''}: {what}", file=out or sys.stderr)


def track(
    name: str = "run",
    *,
    project: str | None = None,
    backend: str = "auto",
    csv: str | os.PathLike[str] | None = DEFAULT_CSV,
    print_result: bool = False,
) -> Tracker:
    """A `Tracker`: `with wattwise.track("train"): ...` or `@wattwise.track("train")`. See the module docstring."""
    return Tracker(name, project=project, backend=backend, csv=csv, print_result=print_result)
