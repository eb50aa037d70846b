"""`wattwise report --job NAME` sums a model's energy over every run of its job in the history (a run whose
folder is gone counts with its recorded figures), `--statement eu-ai-act` writes the EU AI Act's disclosure,
and `--intensity` takes a code of the bundled table of grid carbon intensity, naming its source and year."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.carbon.grid import lookup, table
from wattwise.carbon.series import INTENSITY, Constant, parse_series
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.run import Run
from wattwise.store.limits_memory import LimitsMemory
from wattwise.store.runs import list_runs
from wattwise.tools.workload import emulate_step


def one_run(out: Path, store: Path, start_s: float) -> None:
    clock = VirtualClock(start_s)
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(
        overrides=["monitor.sample_power=false", "monitor.sync_cuda=false", f"output_dir={out}", "job=bert/squad"]
    )
    run = Run(cfg, devices=[gpu], wall_clock=clock, limits_memory=LimitsMemory(str(store)))
    run.start()
    for _ in range(3):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.finish()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite"
    one_run(tmp_path / "runs", path, 1_796_119_200.0)  # a first run, then its resume into the same folder
    one_run(tmp_path / "runs", path, 1_796_122_800.0)
    return path


def test_the_energy_of_every_run_of_a_job_is_summed(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list_runs(job="bert/squad", location=str(store))
    assert len(rows) == 2
    argv = ["report", "--job", "bert/squad", "--store", str(store), "--intensity", "DE", "--pue", "1.2", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == 2 and report["run_ids"] == [r.id for r in rows]
    assert report["device_energy_j"] == pytest.approx(sum(r.energy_j for r in rows))
    assert report["facility_energy_j"] == pytest.approx(1.2 * report["it_energy_j"])
    germany = lookup("DE")
    assert report["emissions_kg_co2e"] == pytest.approx(report["facility_energy_kwh"] * germany.g_per_kwh / 1000)
    assert f"{germany.year} yearly average: Our World in Data" in report["intensity_source"]


def test_a_run_whose_folder_is_gone_counts_with_its_recorded_figures(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = list_runs(job="bert/squad", location=str(store))
    shutil.rmtree(rows[0].folder)
    assert main(["report", "--job", "bert/squad", "--store", str(store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["from_history_only"] == [rows[0].id]
    assert report["device_energy_j"] == pytest.approx(sum(r.energy_j for r in rows))


def test_the_eu_ai_act_disclosure_says_what_was_measured_and_what_was_not(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--job", "bert/squad", "--store", str(store), "--statement", "eu-ai-act"]) == 0
    text = capsys.readouterr().out
    assert "(EU AI Act, Annex XI, Section 1, point 2(e))" in text
    assert "**Simulated.** All runs come from wattwise's simulated GPU model" in text
    assert "not known: every run is simulated" in text
    assert "**Not measured, so not included:** CPU and DRAM energy (not measured)" in text
    assert "2 runs (2 completed)" in text


def test_a_job_without_runs_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--job", "bert/squad", "--store", str(tmp_path / "none.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--job: no run of job 'bert/squad' in the run history" in err
    assert main(["report"]) == 2
    assert "RUN_DIR: give the folder of a run, or --job NAME" in capsys.readouterr().err


def test_every_figure_of_the_bundled_table_has_a_source_a_year_and_a_licence() -> None:
    rows = table()
    assert len(rows) > 250 and {"de", "fr", "us", "gcp:europe-west1", "aws:eu-west-1", "azure:westeurope"} <= set(rows)
    assert all(
        e.licence in ("CC-BY-4.0", "Apache-2.0") and 2000 <= e.year <= 2026 and 0 <= e.g_per_kwh < 1500
        for e in rows.values()
    )
    assert lookup("fr").g_per_kwh < lookup("pl").g_per_kwh  # nuclear France, coal Poland
    assert lookup("aws:eu-west-1").g_per_kwh == lookup("IE").g_per_kwh  # a country's average, and says so
    assert "grid average of Ireland" in lookup("aws:eu-west-1").name


def test_intensity_takes_a_table_code_and_refuses_an_unknown_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    series = parse_series("gcp:europe-west1", INTENSITY)
    assert isinstance(series, Constant) and series.value == lookup("gcp:europe-west1").g_per_kwh
    assert "2024 yearly average: Google Cloud, region-carbon-info" in series.source
    with pytest.raises(UsageError, match=r"--intensity: 'XX' is not in wattwise's table"):
        parse_series("XX", INTENSITY)
