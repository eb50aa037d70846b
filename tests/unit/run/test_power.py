"""Profile windows long enough for the energy counter: a counter that changes 10 times a second (NVML on an
H100) quantises a window of a few 10 ms steps, so tuning measures each limit over up to 20 updates, in
consecutive windows of 5 sized once from a window time every process agrees on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.devices.base import DeviceLostError
from wattwise.distributed import Collective
from wattwise.power_limit import WINDOW_PARTS
from wattwise.run.power import PowerLimitControl
from wattwise.settings.guard import SettingsGuard

STEP_S = 0.01
TUNE = [
    "power_limit.mode=tune",
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=5",
    "power_limit.step_w=100",
    "power_limit.reuse=false",
]


class CoarseCounterGPU(SimulatedGPU):
    """A simulated GPU whose energy counter changes every 0.1 s, as NVML's did on an H100."""

    @property
    def energy_update_period_s(self) -> float:
        return 0.1


class RankZeroSays(Collective):
    """The collective of a process other than rank 0: a broadcast yields rank 0's value."""

    def __init__(self, value: float) -> None:
        self.value, self.broadcasts = value, 0

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self.broadcasts += 1
        return self.value


def tuning(
    tmp_path: Path, gpu: SimulatedGPU, *overrides: str, collective: Collective | None = None
) -> tuple[PowerLimitControl, VirtualClock]:
    clock = VirtualClock()
    power = PowerLimitControl(load_config(overrides=[*TUNE, *overrides]).power_limit, wall_clock=clock, clock=clock)
    power.setup(
        [gpu],
        collective or Collective(),
        memory_key=None,
        label=lambda dev: dev.key,
        guard=lambda: SettingsGuard(tmp_path / "journal", recover=False),
    )
    return power, clock


def first_window_steps(power: PowerLimitControl, clock: VirtualClock, step_s: float = STEP_S) -> int:
    """Steps until the first profile window ends, each step taking `step_s` on the clock."""
    steps_in_window = 0
    window_open = False
    for _ in range(10_000):
        window_open = power.step_begin(Collective(), 0) or window_open
        clock.sleep(step_s)
        steps_in_window += window_open
        if power.step_end(1):
            return steps_in_window
    raise AssertionError("the profile window never ended")


def test_a_coarse_counter_measures_each_limit_in_windows_of_5_of_its_updates_20_at_most(tmp_path: Path) -> None:
    power, clock = tuning(tmp_path, CoarseCounterGPU(0, PowerModel.default()))
    assert power.min_profile_s() == pytest.approx(2.0)  # what a limit is measured over, at most
    assert first_window_steps(power, clock) == 50  # a quarter of it: 0.5 s of 10 ms steps
    assert power.tuner is not None and power.tuner.profile_steps == 50
    assert power.tuner.window_parts == WINDOW_PARTS == 4


def test_an_exact_counter_keeps_profile_steps(tmp_path: Path) -> None:
    power, clock = tuning(tmp_path, SimulatedGPU(0, PowerModel.default()))
    assert power.min_profile_s() == 0.0
    assert first_window_steps(power, clock) == 5


def test_min_profile_s_set_by_the_user_wins(tmp_path: Path) -> None:
    power, clock = tuning(tmp_path, CoarseCounterGPU(0, PowerModel.default()), "power_limit.min_profile_s=0.5")
    # 0.5 s is 5 updates of this counter: one window, since no part is shorter than 5 updates.
    assert first_window_steps(power, clock) == 50
    assert power.tuner is not None and power.tuner.window_parts == 1


def test_every_process_sizes_its_windows_from_rank_zeros_window_time(tmp_path: Path) -> None:
    """This process's steps took 0.1 s, rank 0's 0.01 s: the windows follow rank 0, so both processes end
    their windows on the same step and issue the same collectives."""
    collective = RankZeroSays(5 * STEP_S)
    power, clock = tuning(tmp_path, CoarseCounterGPU(0, PowerModel.default()), collective=collective)
    assert first_window_steps(power, clock, step_s=0.1) == 50
    assert collective.broadcasts == 1


def test_min_profile_s_must_not_be_negative() -> None:
    from wattwise.config import ConfigError

    with pytest.raises(ConfigError, match=r"power_limit\.min_profile_s must be >= 0"):
        load_config(overrides=["power_limit.min_profile_s=-1"])


def test_once_its_choice_is_in_force_a_step_asks_nothing_of_the_tuner(tmp_path: Path) -> None:
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=STEP_S)
    power, clock = tuning(tmp_path, gpu)
    assert power.tuner is not None
    steps = 0
    while not power.tuner.done:
        power.step_begin(Collective(), steps)
        with gpu.busy():  # emulated work drives the simulated GPU
            clock.sleep(STEP_S)
        steps += 1
        if power.step_end(1):  # each window: the same time, less energy at a lower limit
            power.end_profile_window(
                5 * STEP_S, gpu.power_limit_w() * 5 * STEP_S, memory_key=None, is_main=True, run_id=None
            )
    asked = 0
    real = power.tuner.on_step_begin

    def counted() -> Any:
        nonlocal asked
        asked += 1
        return real()

    power.tuner.on_step_begin = counted  # type: ignore[method-assign]
    for _ in range(20):
        power.step_begin(Collective(), steps)
        power.step_end(1)
    chosen = power.tuner.chosen
    assert chosen is not None and gpu.power_limit_w() == chosen.power_limit_w == power.applied_limit_w
    assert asked <= 2  # the step that applies the choice, and the one that finds it in force
    assert power.steps_at_chosen == 20
    power.restore()


class LostCounterGPU(CoarseCounterGPU):
    """A coarse counter on a GPU that fell off the bus: its energy cannot be read."""

    def energy_j(self) -> float:
        raise DeviceLostError(f"gpu{self.index}: the GPU has fallen off the bus")


class OneOfTwo(Collective):
    """A process of two that counts the broadcasts it takes part in, each step's apart."""

    world_size = 2

    def __init__(self) -> None:
        self.by_step: list[int] = [0]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self.by_step[-1] += 1
        return obj


def test_a_process_that_cannot_read_its_counter_takes_part_in_the_same_broadcasts(tmp_path: Path) -> None:
    # Rank 0 tells every process whether its counter changed, on the steps the tuner asks; a process whose GPU
    # is lost (its counter unreadable) must take part in each of those broadcasts, or the processes hang.
    asked = []
    for gpu in (CoarseCounterGPU(0, PowerModel.default()), LostCounterGPU(0, PowerModel.default())):
        collective = OneOfTwo()
        power, clock = tuning(tmp_path / type(gpu).__name__, gpu, collective=collective)
        for step in range(250):
            power.step_begin(collective, step)
            clock.sleep(STEP_S)
            if power.step_end(1):
                break
            collective.by_step.append(0)
        asked.append(collective.by_step)
        power.restore()
    assert asked[1] == asked[0] and sum(asked[0]) > 2


def test_the_sweep_stops_after_two_costlier_limits_unless_told_to_profile_every_limit(tmp_path: Path) -> None:
    power, _ = tuning(tmp_path / "default", SimulatedGPU(0, PowerModel.default()))
    assert power.tuner is not None and power.tuner.stop_after_worse == 2
    every, _ = tuning(tmp_path / "every", SimulatedGPU(0, PowerModel.default()), "power_limit.stop_after_worse=0")
    assert every.tuner is not None and every.tuner.stop_after_worse == 0


def test_stop_after_worse_must_be_a_count() -> None:
    from wattwise.config import ConfigError

    with pytest.raises(ConfigError, match=r"power_limit\.stop_after_worse must be >= 0"):
        load_config(overrides=["power_limit.stop_after_worse=-1"])
