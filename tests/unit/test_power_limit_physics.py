"""Power-limit tuning against a coarse energy counter: windows aligned to its changes, choices it can resolve.

On the realistic simulated GPU (a counter that changes every 95 ms, noise, settling), timed by a virtual
clock: tuning chooses what it chooses on the ideal GPU, and a run whose windows are too short to tell the
limits apart chooses nothing and says so once.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning
from wattwise.power_limit import PowerLimitTuner
from wattwise.profile import ProfileEntry
from wattwise.run import Run
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.workload import emulate_step

TUNE = ["monitor.sample_power=false", "monitor.sync_cuda=false", "power_limit.mode=tune", "power_limit.reuse=false"]


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def tune(tmp_path: Path, physics: Physics, *overrides: str, steps: int = 3000) -> tuple[Run, list[str]]:
    """A tuning run on one simulated GPU (built-in model, 20 ms steps) timed by a virtual clock."""
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.02, clock=clock, sleep=clock.sleep, physics=physics)
    cfg = load_config(overrides=[*TUNE, f"output_dir={tmp_path / 'run'}", *overrides])
    run = Run(
        cfg, devices=[gpu], wall_clock=clock, settings_guard=lambda: SettingsGuard(tmp_path / "journal", recover=False)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        for _ in range(steps):
            run.step_begin()
            emulate_step([gpu], lambda: None)
            run.step_end()
            if run.power.tuner is not None and run.power.tuner.done:
                break
        run.finish()
    return run, [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]


def test_on_the_realistic_gpu_tuning_chooses_the_ideal_choice_or_its_neighbour(tmp_path: Path) -> None:
    ideal, _ = tune(tmp_path / "ideal", Physics.ideal())
    realistic, said = tune(tmp_path / "realistic", Physics.realistic(seed=4))
    assert ideal.power.tuned_limit_w == 200.0
    assert realistic.power.tuned_limit_w in (175.0, 200.0, 225.0)  # the ideal choice or its neighbour
    assert not said
    tuner = realistic.power.tuner
    assert tuner is not None and tuner.align_to_counter and tuner.finished
    assert tuner.profile_steps >= 19 / 10.5 / 0.02  # windows of at least 20 counter updates


def test_windows_too_short_for_the_counter_choose_nothing_and_say_so_once(tmp_path: Path) -> None:
    run, said = tune(tmp_path, Physics.realistic(seed=4), "power_limit.min_profile_s=0.1")
    assert run.power.tuned_limit_w is None
    chose_nothing = [s for s in said if "chose no limit: the profile windows cannot tell" in s]
    assert len(chose_nothing) == 1 and "power_limit.min_profile_s" in chose_nothing[0]
    summary = run.final_summary
    assert summary is not None and summary.power_limit is not None
    assert summary.power_limit.energy_saved_j is None
    assert summary.power_limit.tuning is not None and not summary.power_limit.tuning.finished


def test_an_aligned_window_opens_and_ends_on_steps_in_which_the_counter_changed() -> None:
    tuner = PowerLimitTuner([300.0, 200.0], wait_steps=0, warmup_steps=1, profile_steps=2, align_to_counter=True)
    assert tuner.on_step_begin().set_limit_w == 300.0
    assert not tuner.on_step_end()  # the warm-up step
    assert tuner.wants_counter and tuner.phase == "align"
    assert not tuner.on_step_begin().begin_window
    assert not tuner.on_step_end(counter_changed=False)  # no change: still waiting
    assert not tuner.on_step_begin().begin_window
    assert not tuner.on_step_end(counter_changed=True)
    assert tuner.on_step_begin().begin_window  # the window opens after the step that saw a change
    assert not tuner.on_step_end()
    assert tuner.wants_counter
    tuner.on_step_begin()
    assert not tuner.on_step_end(counter_changed=False)  # two steps in, but the counter has not moved
    tuner.on_step_begin()
    assert tuner.on_step_end(counter_changed=True)
    assert tuner.window_steps == 3


def entries(*rows: tuple[float, float, float]) -> list[ProfileEntry]:
    return [ProfileEntry(w, t, e) for w, t, e in rows]


def profiled(rows: list[ProfileEntry], uncertainty_j: float) -> PowerLimitTuner:
    tuner = PowerLimitTuner(
        [e.power_limit_w for e in rows], selector="energy", wait_steps=0, warmup_steps=0, profile_steps=1
    )
    for entry in rows:
        tuner.on_step_begin()
        assert tuner.on_step_end()
        tuner.end_window(entry.time_s, entry.energy_j, uncertainty_j)
    return tuner


def test_limits_whose_energy_differs_by_less_than_the_uncertainty_tie_to_the_higher_one() -> None:
    rows = entries((300.0, 1.0, 10.0), (250.0, 1.1, 8.0), (200.0, 1.3, 7.98))
    assert profiled(rows, 0.0).chosen == rows[2]  # exact figures: the least energy
    assert profiled(rows, 0.1).chosen == rows[1]  # 20 mJ apart, known to 100 mJ: the higher limit


def test_a_choice_within_the_uncertainty_of_the_highest_limit_is_not_made() -> None:
    rows = entries((300.0, 1.0, 10.0), (250.0, 1.1, 9.9))
    tuner = profiled(rows, 0.5)
    assert tuner.done and tuner.chosen is None and tuner.unresolved
    assert tuner.unfinished_reason is not None
    assert tuner.unfinished_reason.startswith("the profile windows cannot tell 250 W from 300 W")


def test_on_an_exact_counter_the_least_energy_wins_however_close() -> None:
    rows = entries((300.0, 1.0, 10.0), (250.0, 1.1, 9.999))
    assert profiled(rows, 0.0).chosen == rows[1]
