"""PUE, intensity and price inputs: constants, CSV step series, and clear errors for bad files."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from wattwise.carbon.example import write_series_csv
from wattwise.carbon.series import (
    INTENSITY,
    PRICE,
    PUE,
    Constant,
    StepSeries,
    format_duration,
    parse_duration_s,
    parse_series,
)
from wattwise.errors import UsageError

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "series.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_number_is_a_constant_and_file_is_a_step_series(tmp_path: Path) -> None:
    assert parse_series("1.25", PUE) == Constant(1.25, "constant --pue 1.25")
    path = write_series_csv(tmp_path / "ci.csv", T0, 3600.0, [100.0, 200.0, 300.0])
    series = parse_series(str(path), INTENSITY)
    assert isinstance(series, StepSeries)
    assert series.source == "ci.csv"
    assert series.step_s == 3600.0
    assert (series.start_s, series.end_s) == (T0, T0 + 3 * 3600.0)


def test_step_series_holds_each_value_until_the_next_row(tmp_path: Path) -> None:
    series = parse_series(str(write_series_csv(tmp_path / "ci.csv", T0, 1800.0, [10.0, 20.0])), INTENSITY)
    assert series.value_at(T0) == 10.0
    assert series.value_at(T0 + 1799.0) == 10.0
    assert series.value_at(T0 + 1800.0) == 20.0
    assert series.value_at(T0 + 3599.0) == 20.0  # the last value holds for one step
    with pytest.raises(UsageError, match="covers"):
        series.value_at(T0 + 3600.0)


def test_timezones_are_converted_and_z_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "timestamp,value\n2026-01-01T01:00:00+01:00,1.2\n2026-01-01T01:00:00Z,1.3\n")
    series = parse_series(str(path), PUE)
    assert isinstance(series, StepSeries)
    assert series.timestamps_s == (T0, T0 + 3600.0)


def test_source_label_overrides_file_name(tmp_path: Path) -> None:
    path = write_series_csv(tmp_path / "ci.csv", T0, 3600.0, [100.0, 200.0])
    assert parse_series(str(path), INTENSITY, "grid operator, zone DE").source == "grid operator, zone DE"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "timestamp,value\n2026-01-01T00:00:00Z,1.1\n2026-01-01T01:00:00Z,1.1\n2026-01-01T03:00:00Z,1.1\n",
            r"line 4: .* 2 h after the previous row, but the series step is 1 h .* gaps",
        ),
        ("timestamp,value\n2026-01-01T00:00:00Z,1.1\n2026-01-01T00:00:00Z,1.2\n", "line 3: .*not after it"),
        ("timestamp,value\n2026-01-01T01:00:00Z,1.1\n2026-01-01T00:00:00Z,1.2\n", "line 3: .*not after it"),
        ("timestamp,value\n2026-01-01T00:00:00,1.1\n2026-01-01T01:00:00,1.2\n", "line 2: .*no timezone"),
        ("timestamp,value\nyesterday,1.1\n2026-01-01T01:00:00Z,1.2\n", "line 2: .*not an ISO 8601"),
        ("timestamp,value\n2026-01-01T00:00:00Z,high\n2026-01-01T01:00:00Z,1.2\n", "line 2: value 'high'"),
        ("timestamp,value\n2026-01-01T00:00:00Z,0.9\n2026-01-01T01:00:00Z,1.2\n", "line 2: PUE must be at least 1"),
        ("timestamp,value\n2026-01-01T00:00:00Z,1.1,x\n2026-01-01T01:00:00Z,1.2\n", "line 2: expected 2 columns"),
        ("time,pue\n2026-01-01T00:00:00Z,1.1\n2026-01-01T01:00:00Z,1.2\n", "line 1: header must be"),
        ("timestamp,value\n2026-01-01T00:00:00Z,1.1\n", "needs at least 2"),
        ("", "is empty"),
    ],
)
def test_bad_pue_files_name_the_line_and_the_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_series(str(write(tmp_path, text)), PUE)
    assert str(caught.value).startswith("--pue: ")


def test_bad_constants_and_missing_files_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="carbon intensity must be at least 0"):
        parse_series("-5", INTENSITY)
    with pytest.raises(UsageError, match="finite"):
        parse_series("nan", PUE)
    with pytest.raises(UsageError, match="neither a number nor a readable CSV"):
        parse_series(str(tmp_path / "missing.csv"), INTENSITY)


def test_negative_prices_are_allowed() -> None:
    assert parse_series("-0.02", PRICE) == Constant(-0.02, "constant --price -0.02")


@pytest.mark.parametrize(
    ("text", "seconds"), [("6h", 21600.0), ("30m", 1800.0), ("90s", 90.0), ("2d", 172800.0), ("1h30m", 5400.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text, flag="--duration") == seconds


@pytest.mark.parametrize("text", ["6", "h", "6 hours", "-1h", ""])
def test_bad_durations_say_which_units(text: str) -> None:
    with pytest.raises(UsageError, match=r"--window: .* unit d, h, m or s"):
        parse_duration_s(text, flag="--window")


def test_format_duration_reads_back() -> None:
    assert format_duration(5 * 3600 + 50 * 60 + 59) == "5h50m"
    assert format_duration(2 * 86400) == "2d"
    assert format_duration(0) == "0m"
    assert parse_duration_s(format_duration(93784), flag="--window") == 93780.0
