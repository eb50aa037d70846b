"""`wattwise advise` and `wattwise report` as a user runs them: output, files, exit codes."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from wattwise.carbon.example import ExampleFiles, write_example, write_series_csv
from wattwise.cli import main as cli

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleFiles:
    return write_example(tmp_path_factory.mktemp("example"))


def test_advise_prints_best_start_now_and_saving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ci = write_series_csv(tmp_path / "ci.csv", T0, 3600.0, [500, 500, 100, 100, 100, 100, 100, 100, 500, 500])
    code = cli.main(
        ["advise", "--duration", "6h", "--energy-kwh", "40", "--intensity", str(ci), "--pue", "1.1",
         "--window", "3h", "--now", "2026-03-01T00:00:00Z"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Best start:    2026-03-01T02:00:00+00:00 (in 2 h 00 min)" in out
    assert "emissions 4.4 kg CO2e" in out  # 40 kWh x 1.1 x 100 g/kWh
    assert "Starting now:  2026-03-01T00:00:00+00:00" in out
    # Now: 44 kWh x (2 h at 500 + 4 h at 100) / 6 h = 10.27 kg.
    assert "Saving:        5.867 kg CO2e (57.1%)" in out


def test_advise_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ci = write_series_csv(tmp_path / "ci.csv", T0, 1800.0, [300, 100, 300, 300])
    code = cli.main(
        ["advise", "--duration", "30m", "--energy-kwh", "1", "--intensity", str(ci), "--window", "90m",
         "--now", "2026-03-01T00:00:00+00:00", "--json"]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["objective"] == "emissions"
    assert data["best"]["start_time"] == "2026-03-01T00:30:00+00:00"
    assert data["best"]["emissions_kg_co2e"] == pytest.approx(0.1)
    assert data["now"]["emissions_kg_co2e"] == pytest.approx(0.3)
    assert data["saving"] == pytest.approx(0.2)
    assert data["saving_unit"] == "kg CO2e"
    assert data["saving_percent"] == pytest.approx(100 * 2 / 3)
    assert data["sources"]["intensity"] == "ci.csv"


def test_advise_window_past_the_data_exits_2_with_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ci = write_series_csv(tmp_path / "ci.csv", T0, 3600.0, [100] * 24)
    code = cli.main(
        ["advise", "--duration", "6h", "--energy-kwh", "40", "--intensity", str(ci), "--window", "48h",
         "--now", "2026-03-01T00:00:00Z"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "wattwise advise: error: --intensity: ci.csv ends at 2026-03-02T00:00:00+00:00" in err
    assert "use --window 18h or less" in err


def test_advise_bad_duration_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["advise", "--duration", "six", "--energy-kwh", "1", "--window", "1h"]) == 2
    assert "--duration: 'six' is not a duration" in capsys.readouterr().err


def test_report_writes_files_and_prints_the_statement(
    example: ExampleFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["report", str(example.run_dir), "--pue", str(example.pue_csv), "--intensity", str(example.intensity_csv),
         "--intensity-source", "grid operator (hourly)", "--region", "zone X", "--out", str(tmp_path)]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.startswith("## Energy statement")
    assert "source: grid operator (hourly)" in captured.out
    assert (tmp_path / "energy_statement.md").read_text() == captured.out
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["simulated"] is True
    assert data["intensity_source"] == "grid operator (hourly)"
    assert f"{1000 * data['emissions_kg_co2e']:.0f} g CO2e" in captured.out  # under a kilogram: in grams
    assert (tmp_path / "report.csv").is_file()
    assert f"wrote {tmp_path / 'report.json'}" in captured.err


def test_report_json_and_plots(example: ExampleFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    code = cli.main(
        ["report", str(example.run_dir), "--intensity", "350", "--out", str(tmp_path / "r"),
         "--plot", str(tmp_path / "plots"), "--json"]
    )  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["intensity_source"] == "constant --intensity 350"
    assert data["emissions_kg_co2e"] == pytest.approx(data["facility_energy_kwh"] * 0.35)
    for name in ("power.png", "energy_per_epoch.png"):
        png = (tmp_path / "plots" / name).read_bytes()
        assert png.startswith(b"\x89PNG")
        assert len(png) < 150_000


def test_report_with_a_gap_in_the_pue_exits_2(
    example: ExampleFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = example.pue_csv.read_text().splitlines()
    gappy = tmp_path / "pue.csv"
    gappy.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    code = cli.main(["report", str(example.run_dir), "--pue", str(gappy), "--out", str(tmp_path)])
    assert code == 2
    assert "--pue: " in capsys.readouterr().err


def test_report_on_a_directory_without_a_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "summary.json not found" in capsys.readouterr().err


def test_advise_says_what_it_assumed_of_a_constant_intensity(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        ["advise", "--duration", "6h", "--energy-kwh", "40", "--intensity", "DE", "--window", "3h",
         "--now", "2026-03-01T00:00:00Z"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "Assumed:       intensity " in out and "a constant favours no start over another" in out
    assert "Assumed:       PUE 1 at every hour (not supplied (1.0 assumed))" in out


def test_advise_refuses_an_empty_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["advise", "--duration", "6h", "--energy-kwh", "40", "--window", "3h", "--intensity", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--intensity is empty" in err
