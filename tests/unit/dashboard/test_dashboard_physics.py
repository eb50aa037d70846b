"""A run on the simulated GPU's ideal physics says so on its page, and a comparison that mixes it with runs
on the realistic physics says that its differences mix the physics too."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from tests.support.run_history import make_row
from wattwise.config import load_config
from wattwise.dashboard import pages
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.record.files import read_run_dir
from wattwise.run import Run
from wattwise.tools.workload import emulate_step

T0_S = 1_796_119_200.0


def simulated_run(folder: Path, physics: str) -> Path:
    """Three emulated steps on one simulated GPU of `physics`, on a virtual clock; the run's folder."""
    clock = VirtualClock(T0_S)
    gpu = SimulatedGPU(
        0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep, physics=Physics.named(physics)
    )
    cfg = load_config(overrides=["monitor.sample_power=false", "monitor.sync_cuda=false", f"output_dir={folder}"])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    for _ in range(3):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.finish()
    return folder


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    return {physics: simulated_run(tmp_path / physics, physics) for physics in ("ideal", "realistic")}


def test_a_run_on_the_ideal_physics_says_its_figures_are_exact_and_do_not_compare(runs: dict[str, Path]) -> None:
    ideal, realistic = (read_run_dir(runs[p]) for p in ("ideal", "realistic"))
    assert pages.physics_of(ideal.summary) == "ideal" and pages.physics_of(realistic.summary) == "realistic"
    banner = html.unescape(pages.run_page(ideal, pages.SERVED, title="ideal").split('id="simulated-banner">')[1])
    assert banner.startswith("SIMULATED") and pages.IDEAL_PHYSICS in banner.split("</p>")[0]
    assert pages.IDEAL_PHYSICS not in html.unescape(pages.run_page(realistic, pages.SERVED, title="realistic"))


def test_comparing_an_ideal_run_with_a_realistic_one_says_the_physics_differ(runs: dict[str, Path]) -> None:
    folders = [read_run_dir(runs["ideal"]), read_run_dir(runs["realistic"])]
    rows = [make_row("20261201T100000Z-aaaaaa"), make_row("20261201T110000Z-bbbbbb")]
    page = html.unescape(pages.compare_page(rows, folders))
    assert 'id="mixed-physics"' in page and "ran on the simulated GPU's ideal physics" in page
    assert "SIMULATED (ideal physics)" in page and "SIMULATED (realistic physics)" in page
    alike = html.unescape(pages.compare_page(rows, [folders[1], folders[1]]))
    assert 'id="mixed-physics"' not in alike


def test_runs_compare_names_each_runs_physics_and_says_when_they_are_mixed(runs: dict[str, Path]) -> None:
    from wattwise.cli.runs import compare_lines

    rows = [
        make_row("20261201T100000Z-aaaaaa", folder=str(runs["ideal"])),
        make_row("20261201T110000Z-bbbbbb", folder=str(runs["realistic"])),
    ]
    lines = compare_lines(rows)
    (figures,) = [line for line in lines if line.startswith("figures")]
    assert "simulated (ideal physics)" in figures and "simulated (realistic physics)" in figures
    assert lines[-1].startswith("Some of these runs ran on the simulated GPU's ideal physics")
    assert not compare_lines([rows[1], rows[1]])[-1].startswith("Some of these runs")
