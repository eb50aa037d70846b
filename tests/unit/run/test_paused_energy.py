"""Pauses (a checkpoint, a validation) on the realistic simulated GPU, whose counter changes every 0.1 s or so.

A pause shorter than the counter resolves has no energy to report: it is printed as unresolved, never as a
figure (the counter may tick once inside it: 25 J in 0.04 s, more
than the GPU can draw). A pause the counter resolves is printed with its ±.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.record.summary import NonTrainingTime, format_summary, paused_energy
from wattwise.run import Run


def run_with_pauses(tmp_path: Path, pause_s: float) -> tuple[str, dict]:
    """Ten steps of emulated work with a checkpoint of `pause_s` after each: the printed lines and summary."""
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), clock=clock, sleep=clock.sleep, physics=Physics.realistic(seed=3))
    out = tmp_path / "run"
    cfg = load_config(overrides=[f"output_dir={out}", "monitor.sample_power=false", "monitor.sync_cuda=false"])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    for _ in range(10):
        run.step_begin()
        with gpu.busy():
            clock.sleep(0.5)
        run.pause("checkpoint")
        with gpu.busy():
            clock.sleep(pause_s)
        run.step_end()
    record = run.finish()
    assert record is not None
    return format_summary(record), json.loads((out / "summary.json").read_text())


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def test_pauses_shorter_than_the_counter_resolves_are_printed_unresolved(tmp_path: Path) -> None:
    printed, s = run_with_pauses(tmp_path, 0.004)
    paused = s["non_training"]["checkpoint"]
    assert paused["energy_uncertainty_j"] >= paused["energy_j"]  # what the counter says of them is noise
    [line] = [line for line in printed.splitlines() if line.strip().startswith("checkpoint:")]
    assert "energy unresolved (shorter than the energy counter resolves)" in line
    assert " J" not in line and "±" not in line  # no figure


def test_pauses_the_counter_resolves_are_printed_with_their_uncertainty(tmp_path: Path) -> None:
    printed, s = run_with_pauses(tmp_path, 2.0)
    paused = s["non_training"]["checkpoint"]
    assert paused["energy_j"] > paused["energy_uncertainty_j"]
    [line] = [line for line in printed.splitlines() if line.strip().startswith("checkpoint:")]
    assert " ± " in line and "unresolved" not in line and "(10x; not in step figures)" in line


def test_a_summary_without_uncertainties_prints_its_pauses_as_figures() -> None:
    assert paused_energy(NonTrainingTime(time_s=1.0, energy_j=120.0, count=2)) == "120.0 J"
