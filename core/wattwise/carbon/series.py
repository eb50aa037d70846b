"""Facility inputs that vary in time: PUE, grid carbon intensity, electricity price (pure, no clock).

Each input is either a `Constant` or a `StepSeries` loaded from a CSV file `timestamp,value` with
timezone-aware ISO 8601 timestamps. A step series holds each value from its timestamp until the next
one, and the last value for one more step: that is how hourly averages (the usual form of grid data and
PUE logs) are published, and it makes integrals over a run exact sums. Rows must be evenly spaced; a
missing row (a gap), a duplicate, a row out of order, a naive timestamp or a value out of range is a
`UsageError` naming the file, the line and the fix, because silently bridging a gap would invent data.
"""

from __future__ import annotations

import bisect
import csv
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from wattwise import bounds
from wattwise.errors import UsageError
from wattwise.safe_files import read_text

#: Two timestamps closer than this (seconds) count as the same instant when checking the step.
_STEP_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class Quantity:
    """What an input measures: its name in messages, the CLI flag that sets it, its unit and bounds."""

    name: str
    flag: str
    unit: str
    minimum: float | None
    #: The highest plausible value (`wattwise.bounds`): above it, a typo or a unit mix-up.
    maximum: float

    def setting(self, name: str) -> Quantity:
        """The same quantity set by `name` (a config key, an environment variable): messages name that."""
        return replace(self, flag=name)


PUE = Quantity("PUE", "--pue", "", bounds.PUE.low, bounds.PUE.high)
INTENSITY = Quantity(
    "carbon intensity", "--intensity", "gCO2e/kWh", bounds.INTENSITY_G_PER_KWH.low, bounds.INTENSITY_G_PER_KWH.high
)
#: Prices may be negative (wholesale markets with surplus renewables), so no lower bound.
PRICE = Quantity("electricity price", "--price", "per kWh", None, bounds.PRICE_PER_KWH.high)


@dataclass(frozen=True)
class Constant:
    """One value at every instant."""

    value: float
    source: str

    @property
    def start_s(self) -> float:
        """Start of coverage: always."""
        return -math.inf

    @property
    def end_s(self) -> float:
        """End of coverage: never."""
        return math.inf

    def value_at(self, t_s: float) -> float:
        """The value: the same at every instant."""
        return self.value

    def breakpoints_s(self, start_s: float, end_s: float) -> list[float]:
        """Instants strictly inside (start_s, end_s) where the value may change: none."""
        return []


@dataclass(frozen=True)
class StepSeries:
    """Values held from each timestamp (unix seconds, UTC) until the next; the last for one `step_s`."""

    timestamps_s: tuple[float, ...]
    values: tuple[float, ...]
    step_s: float
    source: str

    @property
    def start_s(self) -> float:
        """Start of coverage: the first timestamp."""
        return self.timestamps_s[0]

    @property
    def end_s(self) -> float:
        """End of coverage: the last value holds for one step."""
        return self.timestamps_s[-1] + self.step_s

    def value_at(self, t_s: float) -> float:
        """The value holding at `t_s`.

        Raises:
            UsageError: `t_s` is outside the series' coverage; the message names the span covered.
        """
        if not self.start_s <= t_s < self.end_s:
            raise UsageError(
                f"{self.source} covers {format_utc(self.start_s)} to {format_utc(self.end_s)}, "
                f"not {format_utc(t_s)}; supply a series that covers it"
            )
        return self.values[bisect.bisect_right(self.timestamps_s, t_s) - 1]

    def breakpoints_s(self, start_s: float, end_s: float) -> list[float]:
        """Timestamps strictly inside (start_s, end_s), where the value may change."""
        lo = bisect.bisect_right(self.timestamps_s, start_s)
        hi = bisect.bisect_left(self.timestamps_s, end_s)
        return list(self.timestamps_s[lo:hi])


Series = Constant | StepSeries


def check_covers(series: Series, start_s: float, end_s: float, quantity: Quantity, purpose: str) -> None:
    """Raise a `UsageError` unless `series` has a value at every instant of [start_s, end_s)."""
    if series.start_s <= start_s and end_s <= series.end_s:
        return
    raise UsageError(
        f"{quantity.flag}: {series.source} covers {format_utc(series.start_s)} to "
        f"{format_utc(series.end_s)}, but {purpose} needs {format_utc(start_s)} to {format_utc(end_s)}; "
        "supply a series that covers that span"
    )


def check_series_values(series: Series, quantity: Quantity) -> None:
    """Raise a `UsageError` unless every value of `series` is finite and within the quantity's range.

    Loading checks each value already; this guards series built in code (a negative PUE or intensity
    would make a report's facility energy or emissions negative).
    """
    values = (series.value,) if isinstance(series, Constant) else series.values
    for value in values:
        _check_value(value, quantity, where=f"{quantity.flag}: {series.source}")


def parse_series(text: str, quantity: Quantity, source: str | None = None) -> Series:
    """A CLI value: a number is a constant, anything else is the path of a `timestamp,value` CSV file.

    Errors name `quantity.flag`: `--intensity`, or `quantity.setting(...)` for the config key or the
    environment variable that gave the text.

    For the carbon intensity, a code of wattwise's bundled table (`DE`, `gcp:europe-west1`;
    `wattwise.carbon.grid`) is that table's yearly average, with its source, year and licence as `source`
    (unless a file of that name exists).

    `source` names where the figures come from (for the report); it defaults to "constant" or the file
    name.
    """
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None and quantity.name == INTENSITY.name and not Path(text).exists():
        from wattwise.carbon.grid import looks_like_code, lookup

        if looks_like_code(text):
            entry = lookup(text, flag=quantity.flag)
            return Constant(entry.g_per_kwh, source or entry.describe())
    if value is None:
        return load_series_csv(Path(text), quantity, source)
    _check_value(value, quantity, where=quantity.flag)
    return Constant(value, source or f"constant {quantity.flag} {text}")


#: The environment variable that sets `--intensity` once (a number, a CSV series, or a table code), for
#: `wattwise report` and the dashboard alike.
INTENSITY_ENV = "WATTWISE_INTENSITY"


def intensity_given(given: str | None, source: str | None = None) -> Series | None:
    """`--intensity` when given, else `$WATTWISE_INTENSITY`, else None; an error names the one that gave it."""
    if given:
        return parse_series(given, INTENSITY, source)
    from_env = os.environ.get(INTENSITY_ENV, "").strip()
    return parse_series(from_env, INTENSITY.setting(INTENSITY_ENV), source) if from_env else None


def load_series_csv(path: Path, quantity: Quantity, source: str | None = None) -> StepSeries:
    """Read a `timestamp,value` CSV (header first) into an evenly spaced step series."""
    if not path.is_file():
        raise UsageError(f"{quantity.flag}: {path} is neither a number nor a readable CSV file")
    text = read_text(
        path,
        what=f"{quantity.flag}: {path}",
        expected="a `timestamp,value` CSV",
        fix="give a UTF-8 `timestamp,value` CSV file",
    )
    reader = csv.reader(text.splitlines())
    try:
        rows = list(reader)
    except csv.Error as err:
        raise UsageError(f"{quantity.flag}: {path} line {reader.line_num}: not valid CSV ({err})") from None
    return series_from_rows(rows, quantity, source or path.name, where=str(path))


def series_from_rows(rows: Iterable[list[str]], quantity: Quantity, source: str, *, where: str) -> StepSeries:
    """Validate CSV rows (header first, blank lines skipped) into a `StepSeries`."""
    numbered = [(n, row) for n, row in enumerate(rows, start=1) if any(cell.strip() for cell in row)]
    if not numbered:
        raise UsageError(f"{quantity.flag}: {where} is empty; it needs a header `timestamp,value` and rows")
    header_line, header = numbered[0]
    if [cell.strip().lower() for cell in header[:1]] != ["timestamp"] or len(header) != 2:
        raise UsageError(
            f"{quantity.flag}: {where} line {header_line}: header must be `timestamp,value` "
            f"(got {_shown(','.join(header))})"
        )
    times: list[float] = []
    values: list[float] = []
    for line, row in numbered[1:]:
        at = f"{where} line {line}"
        if len(row) != 2:
            raise UsageError(f"{quantity.flag}: {at}: expected 2 columns `timestamp,value`, got {len(row)}")
        times.append(parse_timestamp_s(row[0], where=f"{quantity.flag}: {at}"))
        try:
            value = float(row[1])
        except ValueError:
            raise UsageError(f"{quantity.flag}: {at}: value {_shown(row[1])} is not a number") from None
        _check_value(value, quantity, where=f"{quantity.flag}: {at}")
        values.append(value)
    if len(times) < 2:
        raise UsageError(
            f"{quantity.flag}: {where} has {len(times)} row(s); a series needs at least 2 "
            f"(for one value everywhere pass a number, e.g. {quantity.flag} {quantity.minimum or 1})"
        )
    step_s = times[1] - times[0]
    for i in range(1, len(times)):
        gap_s = times[i] - times[i - 1]
        if abs(gap_s - step_s) > _STEP_TOLERANCE_S or step_s <= 0:
            line = numbered[i + 1][0]
            raise UsageError(
                f"{quantity.flag}: {where} line {line}: {format_utc(times[i])} comes "
                f"{_describe_gap(gap_s)} after the previous row, but the series step is "
                f"{_describe_gap(step_s)} (from its first two rows); rows must be in order, "
                "evenly spaced, with no gaps or duplicates: fill or remove rows to fix it"
            )
    return StepSeries(tuple(times), tuple(values), step_s, source)


def parse_timestamp_s(text: str, *, where: str) -> float:
    """Unix seconds of a timezone-aware ISO 8601 timestamp ("Z" accepted for UTC)."""
    cleaned = text.strip()
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise UsageError(
            f"{where}: {_shown(text)} is not an ISO 8601 timestamp (e.g. 2026-01-31T14:00:00+00:00)"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise UsageError(f"{where}: timestamp {text!r} has no timezone; add one, e.g. +00:00 or Z")
    return moment.timestamp()


def format_utc(t_s: float) -> str:
    """ISO 8601 in UTC to the second, or "the beginning/end of time" for unbounded coverage."""
    if math.isinf(t_s):
        return "the beginning of time" if t_s < 0 else "the end of time"
    return datetime.fromtimestamp(t_s, tz=timezone.utc).isoformat(timespec="seconds")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
#: The longest duration read: more is a typo, and would overflow the dates computed from it.
MAX_DURATION_S = 36500 * 86400.0


def parse_duration_s(text: str, *, flag: str) -> float:
    """Seconds of a duration such as `6h`, `30m`, `90s`, `2d` or `1h30m`."""
    cleaned = text.strip().lower()
    parts = _DURATION_PART.findall(cleaned)
    if not parts or "".join(number + unit for number, unit in parts) != cleaned:
        raise UsageError(f"{flag}: {_shown(text)} is not a duration; use a number and a unit d, h, m or s (e.g. 6h)")
    seconds = sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    if seconds > MAX_DURATION_S:
        raise UsageError(
            f"{flag}: {_shown(text)} is longer than {MAX_DURATION_S / 86400:g} days (100 years); "
            "give a shorter duration"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """Whole minutes as `parse_duration_s` reads them, e.g. `5h50m`, `2d`, `0m` (seconds rounded down)."""
    minutes = max(0, math.floor(seconds / 60.0 + 1e-9))
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    text = "".join(f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n)
    return text or "0m"


def _check_value(value: float, quantity: Quantity, *, where: str) -> None:
    if not math.isfinite(value):
        raise UsageError(f"{where}: {quantity.name} must be a finite number (got {value})")
    if quantity.minimum is not None and value < quantity.minimum:
        raise UsageError(f"{where}: {quantity.name} must be at least {quantity.minimum:g} (got {value:g})")
    if abs(value) > quantity.maximum:
        unit = f" {quantity.unit}" if quantity.unit else ""
        raise UsageError(
            f"{where}: {quantity.name} must be at most {quantity.maximum:g}{unit} (got {value:g}); check the unit"
        )


def _shown(text: str) -> str:
    """`text` quoted for a message, cut short: a whole line of a bad file would drown the message."""
    quoted = repr(text)
    return quoted if len(quoted) <= 60 else quoted[:57] + "..."


def _describe_gap(seconds: float) -> str:
    if seconds <= 0:
        return f"{seconds:g} s (not after it)"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size and (seconds / size) == round(seconds / size, 3):
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"
