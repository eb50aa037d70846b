"""A run's energy figures say how precisely they were measured, combined over processes in quadrature."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from tests.support.two_processes import TwoProcesses
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.run import Run
from wattwise.tools.workload import emulate_step

PERIOD_S = 0.1
MODEL = PowerModel.default()
BUSY_W = MODEL.at_limit(300.0)[1]


class CoarseCounterGPU(SimulatedGPU):
    """A simulated GPU whose energy counter says it changes every 0.1 s, as NVML's does."""

    @property
    def energy_update_period_s(self) -> float:
        return PERIOD_S


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def test_each_figure_carries_one_counter_update_per_end_per_gpu_in_quadrature_over_processes(tmp_path: Path) -> None:
    clock = VirtualClock()
    gpu = CoarseCounterGPU(0, MODEL, base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    overrides = ["monitor.sample_power=false", "monitor.sync_cuda=false", "log_every_n_steps=10"]
    cfg = load_config(overrides=[*overrides, f"output_dir={tmp_path / 'run'}"])
    run = Run(cfg, collective=TwoProcesses(), devices=[gpu], wall_clock=clock)
    run.start()
    logged = []
    for _ in range(20):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        rec = run.step_end()
        if rec is not None:
            logged.append(rec)
    epoch = run.epoch_end()
    summary = run.finish()
    assert summary is not None and epoch is not None
    # One GPU, busy: each end off by BUSY_W x 0.1 s; two ends; two processes (the other mirrors this one).
    per_window_j = math.sqrt(2 * 2) * BUSY_W * PERIOD_S
    assert [r.energy_uncertainty_j for r in logged] == [pytest.approx(per_window_j / 10)] * 2  # per step
    assert epoch.energy_uncertainty_j == pytest.approx(per_window_j)
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert data["epochs"][0]["energy_uncertainty_j"] == pytest.approx(per_window_j)
    # The run's end exchange gathers this process's figures alone here (TwoProcesses): one GPU's two ends.
    assert data["energy_uncertainty_j"] == pytest.approx(math.sqrt(2) * BUSY_W * PERIOD_S)
