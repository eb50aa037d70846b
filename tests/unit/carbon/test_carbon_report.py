"""The run report: facility energy and emissions integrated over the power timeline, and the statement."""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from wattwise.carbon.example import sampled_run, write_example, write_series_csv
from wattwise.carbon.series import INTENSITY, PRICE, PUE, Constant, parse_series
from wattwise.errors import UsageError
from wattwise.record.files import read_run_dir, write_run_dir
from wattwise.record.report import FacilityInputs, RunReport, build_report, energy_statement, write_report
from wattwise.record.summary import PowerLimitSummary

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
HOUR = 3600.0


def step_power(offset_s: float) -> float:
    """300 W in the first hour, 100 W in the second."""
    return 300.0 if offset_s < HOUR else 100.0


def two_hour_run(tmp_path: Path, *, with_power: bool = True, counter_scale: float = 1.0, **extra: Any) -> Path:
    summary, samples = sampled_run(
        T0, 2 * HOUR, {"rank0/gpu0": step_power}, sample_period_s=0.5, counter_scale=counter_scale, **extra
    )
    return write_run_dir(tmp_path / "run", summary, samples if with_power else None)


def hand_made_run(tmp_path: Path, summary: dict[str, Any]) -> Path:
    """A run directory whose summary.json was written by hand (older runs, other tools)."""
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return tmp_path


def hourly_inputs(tmp_path: Path, pue: list[float], intensity: list[float]) -> FacilityInputs:
    return FacilityInputs(
        pue=parse_series(str(write_series_csv(tmp_path / "pue.csv", T0, HOUR, pue)), PUE),
        intensity=parse_series(str(write_series_csv(tmp_path / "ci.csv", T0, HOUR, intensity)), INTENSITY),
    )


def test_facility_energy_and_emissions_follow_the_power_timeline(tmp_path: Path) -> None:
    report = build_report(read_run_dir(two_hour_run(tmp_path)), hourly_inputs(tmp_path, [1.5, 1.1], [100.0, 500.0]))
    # Hour 1: 0.3 kWh x 1.5 = 0.45 kWh at 100 g/kWh; hour 2: 0.1 kWh x 1.1 = 0.11 kWh at 500 g/kWh.
    assert report.device_energy_kwh == pytest.approx(0.4, rel=1e-3)
    assert report.facility_energy_kwh == pytest.approx(0.56, rel=1e-3)
    assert report.emissions_kg_co2e == pytest.approx(0.100, rel=1e-3)
    assert report.pue_effective == pytest.approx(1.4, rel=1e-3)
    assert report.intensity_effective_g_per_kwh == pytest.approx(100.0 / 0.56, rel=1e-3)
    # The run's average power against the series' averages would say 0.4 x 1.3 x 300 = 156 g: far off.
    assert report.emissions_kg_co2e is not None
    assert abs(report.emissions_kg_co2e - 0.156) > 0.05


def test_timeline_is_scaled_to_the_energy_counter(tmp_path: Path) -> None:
    inputs = hourly_inputs(tmp_path, [1.5, 1.1], [100.0, 500.0])
    report = build_report(read_run_dir(two_hour_run(tmp_path, counter_scale=1.1)), inputs)
    assert report.timeline_scale == pytest.approx(1.1)
    assert report.device_energy_kwh == pytest.approx(0.44, rel=1e-3)
    assert report.facility_energy_kwh == pytest.approx(0.56 * 1.1, rel=1e-3)
    assert report.emissions_kg_co2e == pytest.approx(0.110, rel=1e-3)


def test_without_power_csv_energy_is_spread_uniformly_and_the_report_says_so(tmp_path: Path) -> None:
    run = read_run_dir(two_hour_run(tmp_path, with_power=False))
    report = build_report(run, hourly_inputs(tmp_path, [1.5, 1.1], [100.0, 500.0]))
    # 0.2 kWh per hour: 0.2 x 1.5 x 100 + 0.2 x 1.1 x 500 = 30 + 110 g.
    assert report.facility_energy_kwh == pytest.approx(0.52, rel=1e-3)
    assert report.emissions_kg_co2e == pytest.approx(0.140, rel=1e-3)
    assert "power.csv missing" in report.energy_method
    assert "power.csv missing" in energy_statement(report)
    assert report.timeline_scale is None


def test_cpu_energy_is_part_of_facility_energy(tmp_path: Path) -> None:
    run = read_run_dir(two_hour_run(tmp_path, cpu_energy_j=0.2 * 3.6e6))
    report = build_report(run, FacilityInputs(pue=Constant(1.5, "operator"), intensity=Constant(200.0, "grid")))
    assert report.it_energy_kwh == pytest.approx(0.6, rel=1e-3)
    assert report.facility_energy_kwh == pytest.approx(0.9, rel=1e-3)
    assert report.emissions_kg_co2e == pytest.approx(0.18, rel=1e-3)


def test_missing_inputs_are_labelled_not_invented(tmp_path: Path) -> None:
    report = build_report(read_run_dir(two_hour_run(tmp_path)), FacilityInputs())
    assert report.emissions_kg_co2e is None
    assert report.cost is None
    assert report.intensity_source == "not supplied"
    assert report.pue_source.startswith("not supplied")
    assert report.facility_energy_j == pytest.approx(report.device_energy_j)
    statement = energy_statement(report)
    assert "carbon intensity: not supplied" in statement
    assert "PUE) was not supplied" in statement


def test_series_that_do_not_cover_the_run_are_a_clear_error(tmp_path: Path) -> None:
    short = parse_series(str(write_series_csv(tmp_path / "ci.csv", T0, HOUR / 2, [100.0, 200.0])), INTENSITY)
    with pytest.raises(UsageError, match=r"--intensity: ci.csv covers .* but the run needs .*2026-01-01T02:00"):
        build_report(read_run_dir(two_hour_run(tmp_path)), FacilityInputs(intensity=short))


def test_cost_from_a_price_series(tmp_path: Path) -> None:
    price = parse_series(str(write_series_csv(tmp_path / "p.csv", T0, HOUR, [0.10, 0.40])), PRICE)
    report = build_report(
        read_run_dir(two_hour_run(tmp_path)), FacilityInputs(pue=Constant(1.0, "x"), price=price, currency="EUR")
    )
    assert report.cost == pytest.approx(0.3 * 0.10 + 0.1 * 0.40, rel=1e-3)
    assert "EUR" in energy_statement(report)


def test_missing_optional_summary_keys_are_tolerated(tmp_path: Path) -> None:
    minimal = {"start_time": "2026-01-01T00:00:00+00:00", "end_time": "2026-01-01T01:00:00+00:00", "energy_j": 3.6e6}
    report = build_report(read_run_dir(hand_made_run(tmp_path, minimal)), FacilityInputs())
    assert report.time_s == HOUR
    assert report.device_energy_kwh == pytest.approx(1.0)
    assert report.simulated is False
    assert "none recorded" in energy_statement(report)


def test_summary_without_energy_is_a_usage_error(tmp_path: Path) -> None:
    summary = {"start_time": "2026-01-01T00:00:00+00:00", "end_time": "2026-01-01T01:00:00+00:00"}
    with pytest.raises(UsageError, match="'energy_j' is missing"):
        read_run_dir(hand_made_run(tmp_path, summary))


@pytest.fixture(scope="module")
def example_report(tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """The README example's report (simulated run, hourly PUE, intensity and price)."""
    files = write_example(tmp_path_factory.mktemp("example"))
    inputs = FacilityInputs(
        pue=parse_series(str(files.pue_csv), PUE),
        intensity=parse_series(str(files.intensity_csv), INTENSITY),
        price=parse_series(str(files.price_csv), PRICE),
        currency="EUR",
        region="example region",
    )
    return build_report(read_run_dir(files.run_dir), inputs)


#: A figure in the statement: a number and its unit.
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(kWh|J|W|kg CO2e|g CO2e|t CO2e|gCO2e/kWh|h|%|EUR)(?![\w/])")


def report_values_in(unit: str, report: dict[str, Any]) -> list[float]:
    """Every value of the report JSON a figure with `unit` may show, converted to that unit."""
    numbers = {k: v for k, v in report.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    by_suffix = {
        "kWh": [v for k, v in numbers.items() if k.endswith("_kwh")]
        + [v / 3.6e6 for k, v in numbers.items() if k.endswith("_j")],
        "J": [v for k, v in numbers.items() if k.endswith("_j")],
        "W": [v for k, v in numbers.items() if k.endswith("_w")],
        "kg CO2e": [v for k, v in numbers.items() if k.endswith("_kg_co2e")],
        "g CO2e": [1000 * v for k, v in numbers.items() if k.endswith("_kg_co2e")],
        "t CO2e": [v / 1000 for k, v in numbers.items() if k.endswith("_kg_co2e")],
        "gCO2e/kWh": [v for k, v in numbers.items() if k.endswith("_g_per_kwh")],
        "h": [v / 3600 for k, v in numbers.items() if k.endswith("_s")],
        "%": [100 * v for k, v in numbers.items() if k.endswith("_fraction")],
        "EUR": [numbers["cost"]],
    }
    return by_suffix[unit]


def test_every_statement_figure_equals_a_report_json_figure(example_report: RunReport, tmp_path: Path) -> None:
    paths = write_report(example_report, tmp_path / "out")
    data = json.loads(paths[0].read_text())
    statement = paths[2].read_text()
    figures = FIGURE.findall(statement)
    assert len(figures) >= 12
    for text, unit in figures:
        shown = float(text)
        decimals = len(text.split(".")[1]) if "." in text else 0
        # A rounded figure is within half a unit of its last digit (4 significant digits at most).
        tolerance = max(0.5 * 10**-decimals, abs(shown) * 5e-4)
        candidates = report_values_in(unit, data)
        assert any(abs(shown - v) <= tolerance for v in candidates), f"{text} {unit} is not in the report"
    # And the key figures are there, rounded as the statement rounds them.
    assert f"{data['device_energy_kwh']:.4g} kWh" in statement
    assert f"{data['facility_energy_kwh']:.4g} kWh" in statement
    assert f"{1000 * data['emissions_kg_co2e']:.0f} g CO2e" in statement  # under a kilogram: in grams
    assert f"PUE) of {data['pue_effective']:.3f}" in statement
    assert f"{data['power_limit_w']:g} W" in statement


def test_statement_says_simulated_where_when_and_what_was_done(example_report: RunReport) -> None:
    statement = energy_statement(example_report)
    assert "**Simulated.**" in statement
    assert "node1 in example region" in statement
    assert "2026-11-21 21:00 UTC to 2026-11-22 00:00 UTC" in statement
    assert "source: pue.csv" in statement
    assert "source: intensity.csv" in statement
    assert "power limit was set to 175 W" in statement
    assert "saved" in statement


def test_measured_runs_are_not_called_simulated(tmp_path: Path) -> None:
    run = read_run_dir(two_hour_run(tmp_path, simulated=False))
    statement = energy_statement(build_report(run, FacilityInputs()))
    assert "imulated" not in statement
    assert "measured with nvml" in statement


def test_csv_is_one_row_with_the_json_figures(example_report: RunReport, tmp_path: Path) -> None:
    json_path, csv_path, _ = write_report(example_report, tmp_path / "out")
    rows = list(csv.DictReader(csv_path.open()))
    data = json.loads(json_path.read_text())
    assert len(rows) == 1
    assert float(rows[0]["emissions_kg_co2e"]) == data["emissions_kg_co2e"]
    assert float(rows[0]["facility_energy_j"]) == data["facility_energy_j"]
    assert rows[0]["simulated"] == "True"
    assert json.loads(rows[0]["devices"]) == ["rank0/gpu0", "rank1/gpu0"]


def test_savings_come_from_the_summary_and_scale_to_the_facility(tmp_path: Path) -> None:
    limit = PowerLimitSummary(
        mode="tune",
        selector="energy",
        chosen_power_limit_w=150.0,
        baseline_energy_j=2.0 * 3.6e6,
        energy_saved_j=0.5 * 3.6e6,
    )
    run = read_run_dir(two_hour_run(tmp_path, power_limit=limit))
    report = build_report(run, FacilityInputs(pue=Constant(1.2, "x"), intensity=Constant(400.0, "y")))
    assert report.power_limit_w == 150.0
    assert report.energy_saved_fraction == pytest.approx(0.25)
    assert report.facility_energy_saved_kwh == pytest.approx(0.6)
    assert report.emissions_saved_kg_co2e == pytest.approx(0.24)
    assert "(25.0%)" in energy_statement(report)


def test_the_statement_rounds_energy_to_what_the_counters_resolved(tmp_path: Path) -> None:
    # 0.4 kWh (1.44 MJ) known to 2 kJ: 0.4000 ± 0.0006 kWh, not 0.4 kWh to four digits beyond what was seen.
    run = read_run_dir(two_hour_run(tmp_path, energy_uncertainty_j=2000.0, simulated_driven_by="steps"))
    report = build_report(run, FacilityInputs(pue=Constant(1.5, "x"), intensity=Constant(400.0, "y")))
    assert report.device_energy_uncertainty_j == 2000.0
    statement = energy_statement(report)
    assert "The GPUs used 0.4000 ± 0.0006 kWh (1440000 ± 2000 J, simulated, driven by your steps)" in statement
    assert "the facility used 0.6000 ± 0.0008 kWh" in statement  # the same fraction at the facility
    assert "240.0 ± 0.3 g CO2e" in statement  # 0.24 kg, in grams, to the same fraction


def test_a_saving_within_its_uncertainty_is_reported_as_not_resolved(tmp_path: Path) -> None:
    limit = PowerLimitSummary(
        mode="tune",
        selector="energy",
        chosen_power_limit_w=150.0,
        baseline_energy_j=2.0 * 3.6e6,
        energy_saved_j=0.01 * 3.6e6,
        baseline_estimated=True,
        energy_saved_uncertainty_j=0.02 * 3.6e6,
        saving_resolved=False,
    )
    report = build_report(read_run_dir(two_hour_run(tmp_path, power_limit=limit)), FacilityInputs())
    assert (report.saving_resolved, report.energy_saved_uncertainty_j) == (False, 0.02 * 3.6e6)
    statement = energy_statement(report)
    assert "saving (0.010 ± 0.020 kWh) is not resolved" in statement
    assert "this saved" not in statement


def test_hardware_and_status_come_from_the_summary(tmp_path: Path) -> None:
    devices = ({"key": "gpu0", "name": "NVIDIA A100-SXM4-40GB"}, {"key": "gpu1", "name": "NVIDIA A100-SXM4-40GB"})
    run = read_run_dir(two_hour_run(tmp_path, devices=devices, status="failed"))
    report = build_report(run, FacilityInputs())
    assert report.hardware == "2x NVIDIA A100-SXM4-40GB"
    statement = energy_statement(report)
    assert "with 2x NVIDIA A100-SXM4-40GB (device rank0/gpu0)" in statement
    assert "did not complete (status: failed)" in statement
