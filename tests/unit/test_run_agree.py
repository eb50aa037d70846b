"""Ranks must agree (issue 27), seen from one process of two: a failed change waits for a decision point.

The other process is scripted (`TwoProcesses`): whether it failed, and why. The two-process runs themselves
are in tests/integration/{lightning_energy,accelerate_energy}/test_ranks_agree.py.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import NoPermissionError, PowerModel, SimulatedGPU
from wattwise.distributed import Collective
from wattwise.errors import EnergyPluginWarning
from wattwise.run import Run
from wattwise.workload import emulate_step

TUNE = ["power_limit.mode=tune", "power_limit.wait_steps=0", "power_limit.warmup_steps=1",
        "power_limit.profile_steps=2", "power_limit.step_w=100", "monitor.sample_power=false",
        "monitor.sync_cuda=false", "log_every_n_steps=50"]  # 300, 200, 100 W: windows end at steps 3, 6, 9


class TwoProcesses(Collective):
    """Rank 0 of two; rank 1 mirrors this process's figures, and fails from its step `fails_at` on."""

    rank, world_size = 0, 2

    def __init__(self, fails_at: int | None = None) -> None:
        self.fails_at = fails_at
        self.step = 0
        #: The step of each `any` asked (a decision point).
        self.asked: list[int] = []
        self._reasons_next = False

    def _other_reason(self) -> str | None:
        failed = self.fails_at is not None and self.step >= self.fails_at
        return "setting the power limit to 200 W failed (gpu1: the GPU has fallen off the bus)" if failed else None

    def any(self, flag: bool) -> bool:
        self.asked.append(self.step)
        self._reasons_next = flag or self._other_reason() is not None
        return self._reasons_next

    def all_gather(self, obj: Any) -> list[Any]:
        if self._reasons_next:
            self._reasons_next = False
            return [obj, self._other_reason()]
        return [obj, obj] if not isinstance(obj, dict) else [obj]

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(float(t), 2 * float(e)) for t, e in windows]


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def make_run(tmp_path: Path, collective: TwoProcesses) -> tuple[Run, SimulatedGPU]:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*TUNE, f"output_dir={tmp_path / 'run'}"])
    return Run(cfg, devices=[gpu], wall_clock=clock, collective=collective), gpu


def train(run: Run, gpu: SimulatedGPU, collective: TwoProcesses, steps: int) -> list[float]:
    """`steps` optimizer steps; the GPU's limit during each."""
    limits = []
    for _ in range(steps):
        collective.step += 1
        run.step_begin()
        limits.append(gpu.power_limit_w())
        emulate_step([gpu], lambda: None)
        run.step_end()
    return limits


def test_a_change_that_failed_in_the_other_process_degrades_this_one_at_the_next_window_end(tmp_path):
    collective = TwoProcesses(fails_at=4)
    run, gpu = make_run(tmp_path, collective)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        limits = train(run, gpu, collective, 12)
        run.finish()
    # Asked at the start and at each window's end while tuning (steps 3 and 6); not on the other steps.
    assert collective.asked == [0, 3, 6]
    assert limits == [300.0] * 3 + [200.0] * 3 + [300.0] * 6  # 200 W until every process degraded together
    assert run.power.mode == "measure" and gpu.power_limit_w() == 300.0
    [warned] = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert warned.startswith("wattwise: rank 1: setting the power limit to 200 W failed (gpu1: the GPU has fallen")
    note = warned.removeprefix("wattwise: ").split(" (set strict")[0]
    assert run.summary is not None and note in run.summary["notes"]  # the summary says it too


def test_a_change_that_failed_here_restores_at_once_and_waits_for_the_others(tmp_path):
    collective = TwoProcesses()
    run, gpu = make_run(tmp_path, collective)
    run.start()
    original = SimulatedGPU.set_power_limit_w

    def refused(self: SimulatedGPU, watts: float) -> None:
        if watts < 300:
            raise NoPermissionError("gpu0: insufficient permissions")
        original(self, watts)

    with warnings.catch_warnings(record=True), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("always")
        mp.setattr(SimulatedGPU, "set_power_limit_w", refused)
        limits = train(run, gpu, collective, 4)  # the change to 200 W fails at step 4
        assert run.power.suspended is not None and run.power.mode == "tune"  # no decision point yet
        assert run.power.tuner is not None  # still counting, as the other process does
        train(run, gpu, collective, 2)  # step 6 ends the window: every process degrades
    assert limits == [300.0] * 4
    assert run.power.mode == "measure" and run.power.suspended is None
    assert any(n.startswith("rank 0: setting the power limit to 200 W failed") for n in run._noticed)
