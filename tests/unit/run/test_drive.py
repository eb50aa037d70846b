"""`devices.simulated_drive: steps`: a user's own training steps drive the simulated GPU.

Each step's work here is a sleep on the virtual clock (the time a user's step takes on the CPU), with no
emulated work: the step is taken as its work at the maximum limit and stretched as the power model says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import ConfigError
from wattwise.run import Run

QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false"]
WORK_S = 0.1
MODEL = PowerModel.default()


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def run_steps(tmp_path: Path, *overrides: str, steps: int = 10, pause_in_step: bool = False) -> dict:
    """`steps` steps of `WORK_S` of the user's own work (no emulated work); the run's summary."""
    clock = VirtualClock()
    gpu = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}", *overrides])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    for _ in range(steps):
        run.step_begin()
        clock.sleep(WORK_S / 2)
        if pause_in_step:  # an evaluation inside the step, then training again
            run.pause("validation")
            clock.sleep(1.0)
            run.resume()
        clock.sleep(WORK_S / 2)
        run.step_end()
    run.finish()
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_steps_drive_the_simulated_gpu_stretched_as_the_model_says(tmp_path: Path) -> None:
    s = run_steps(tmp_path, "devices.simulated_drive=steps", "power_limit.mode=cap", "power_limit.cap_w=175")
    time_factor, busy_w = MODEL.at_limit(175.0)
    assert s["simulated_driven_by"] == "steps"
    assert s["time_s"] == pytest.approx(10 * WORK_S * time_factor)  # each step's work, stretched at 175 W
    assert s["energy_j"] == pytest.approx(s["time_s"] * busy_w)  # busy the whole step
    assert not any("drove the simulated GPU" in n for n in s["notes"])


def test_at_the_maximum_limit_a_step_takes_its_own_time(tmp_path: Path) -> None:
    s = run_steps(tmp_path, "devices.simulated_drive=steps")
    assert s["time_s"] == pytest.approx(10 * WORK_S)
    assert s["energy_j"] == pytest.approx(10 * WORK_S * MODEL.at_limit(300.0)[1])


def test_a_pause_inside_a_step_is_idle_and_the_training_around_it_is_stretched(tmp_path: Path) -> None:
    s = run_steps(
        tmp_path, "devices.simulated_drive=steps", "power_limit.mode=cap", "power_limit.cap_w=175", pause_in_step=True
    )
    time_factor, busy_w = MODEL.at_limit(175.0)
    training_s = 10 * WORK_S * time_factor
    assert s["time_s"] == pytest.approx(training_s + 10 * 1.0)
    assert s["non_training"]["validation"]["energy_j"] == pytest.approx(10 * 1.0 * MODEL.idle_power_w)
    assert s["energy_j"] == pytest.approx(training_s * busy_w + 10 * 1.0 * MODEL.idle_power_w)


def test_tuning_on_the_users_own_steps_chooses_the_limit_the_model_favours(tmp_path: Path) -> None:
    s = run_steps(
        tmp_path,
        "devices.simulated_drive=steps",
        "power_limit.mode=tune",
        "power_limit.wait_steps=1",
        "power_limit.warmup_steps=1",
        "power_limit.profile_steps=2",
        "power_limit.step_w=50",
        steps=40,
    )
    # The built-in model's Zeus cost at eta 0.5 is lowest at 200 W (`PowerModel.default`).
    assert s["power_limit"]["chosen_power_limit_w"] == 200.0
    assert s["power_limit"]["saving_resolved"] is True  # an exact counter resolves any saving


def test_off_by_default_the_users_steps_leave_the_gpu_idle_and_say_so(tmp_path: Path) -> None:
    s = run_steps(tmp_path)
    assert s["simulated_driven_by"] == "nothing"
    assert s["time_s"] == pytest.approx(10 * WORK_S)
    assert s["energy_j"] == pytest.approx(10 * WORK_S * MODEL.idle_power_w)
    assert any("devices.simulated_drive=steps" in n for n in s["notes"])


def test_an_unknown_drive_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"devices\.simulated_drive must be one of off, steps"):
        load_config(overrides=["devices.simulated_drive=always"])
