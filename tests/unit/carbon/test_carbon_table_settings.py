"""The bundled table of grid carbon intensity is reached from every place that sets the intensity once: the
config key `carbon.intensity` (a carbon-aware run) and `$WATTWISE_INTENSITY` (`wattwise report`) take a code
as `--intensity` does, refuse an unknown one naming themselves, and the statement names source and year."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.run_records import write_tuned_run
from tests.support.tuning_runs import NO_WAIT_PROFILE, tuning_run
from wattwise.carbon.grid import lookup
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.errors import ConfigError
from wattwise.record.files import read_run_dir
from wattwise.record.report import FacilityInputs, build_report, energy_statement


@pytest.fixture(autouse=True)
def _elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No file named like a code in the working folder, no intensity set by the caller's environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WATTWISE_INTENSITY", raising=False)
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def carbon_aware_run(tmp_path: Path, intensity: str, *, steps: int) -> dict[str, Any]:
    """A carbon-aware tuning run on one simulated GPU following `carbon.intensity`; returns its summary."""
    done = tuning_run(
        tmp_path,
        steps,
        overrides=[
            *NO_WAIT_PROFILE,
            "carbon.aware=true",
            f"carbon.intensity={intensity}",
        ],
        base_step_time_s=1.0,
        clock_start_s=1_795_219_200.0,  # 2026-11-21 UTC
    )
    assert done.run.summary is not None
    return done.run.summary


def test_the_config_key_takes_a_code_a_number_or_a_file(tmp_path: Path) -> None:
    assert load_config(overrides=["carbon.intensity=DE"]).carbon.intensity == "DE"
    assert load_config(overrides=["carbon.intensity=aws:eu-west-1"]).carbon.intensity == "aws:eu-west-1"
    assert load_config(overrides=["carbon.intensity=420"]).carbon.intensity == "420"
    series = tmp_path / "grid.csv"
    series.write_text("timestamp,value\n2026-01-01T00:00:00Z,300\n2026-01-01T01:00:00Z,310\n")
    assert load_config(overrides=[f"carbon.intensity={series}"]).carbon.intensity == str(series)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("XX", "carbon.intensity: 'XX' is not in wattwise's table of grid carbon intensity (e.g. "),
        ("gcp:mars-north1", "carbon.intensity: 'gcp:mars-north1' is not in wattwise's table"),
        ("99999", "carbon.intensity: carbon intensity must be at most 5000 gCO2e/kWh (got 99999); check the unit"),
        ("no-such-file.csv", "carbon.intensity: no-such-file.csv is neither a number nor a readable CSV file"),
    ],
)
def test_the_config_key_refuses_a_bad_value_in_one_line_naming_itself(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(overrides=[f"carbon.intensity={value}"])
    text = str(refused.value)
    assert text.startswith(message) and "\n" not in text
    assert refused.value.keys == ("carbon.intensity",)
    if "table" in message:
        assert "give a country code (ISO 3166-1, such as DE)" in text


def test_a_carbon_aware_run_needs_exactly_one_intensity_key() -> None:
    with pytest.raises(ConfigError, match=r"carbon.aware=true needs exactly one of carbon.intensity \("):
        load_config(
            overrides=[
                "power_limit.mode=tune",
                "carbon.aware=true",
                "carbon.intensity=DE",
                "carbon.intensity_g_per_kwh=300",
            ]
        )


def test_a_carbon_aware_run_follows_a_table_code_and_its_statement_names_source_and_year(tmp_path: Path) -> None:
    germany = lookup("DE")
    summary = carbon_aware_run(tmp_path, "DE", steps=20)
    source = summary["carbon_aware"]["intensity_source"]
    assert source.startswith(f"Germany (DE), {germany.year} yearly average: Our World in Data")
    text = energy_statement(build_report(read_run_dir(tmp_path / "run"), FacilityInputs()))
    assert "the power limit followed the grid's carbon intensity" in text
    assert f"intensity: Germany (DE), {germany.year} yearly average" in text


def test_the_statement_of_a_run_that_was_not_carbon_aware_does_not_mention_it(tmp_path: Path) -> None:
    write_tuned_run(tmp_path / "run", carbon_aware=None)
    text = energy_statement(build_report(read_run_dir(tmp_path / "run"), FacilityInputs()))
    assert "followed the grid's carbon intensity" not in text


def test_the_environment_variable_takes_a_code_and_the_statement_names_source_and_year(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tuned_run(tmp_path / "run")
    monkeypatch.setenv("WATTWISE_INTENSITY", "aws:eu-west-1")
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 0
    ireland = lookup("aws:eu-west-1")
    assert f"(aws:eu-west-1), {ireland.year} yearly average: Our World in Data" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["intensity_effective_g_per_kwh"] == pytest.approx(ireland.g_per_kwh)


def test_an_unknown_code_in_the_environment_variable_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tuned_run(tmp_path / "run")
    monkeypatch.setenv("WATTWISE_INTENSITY", "XX")
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("wattwise report: error: WATTWISE_INTENSITY: 'XX' is not in wattwise's table")
    assert err.count("\n") == 1
