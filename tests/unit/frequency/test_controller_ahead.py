"""The controller changes the clock ahead of the instruction that needs it, and off the training thread.

A faster segment's clock is asked for `AHEAD_CHANGES` clock-change latencies before it starts (by the
instruction times of the iteration before), a slower one's at its start; with `background` the calls run
on a thread of their own.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wattwise.devices.simulated import Physics, SimulatedGPU
from wattwise.frequency.controller import FrequencyController, stage_plan
from wattwise.pipeline.segments import AHEAD_CHANGES
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.levers import VirtualClock

PLAN = [["forward", 0, 990], ["forward", 1, 990], ["backward", 0, 1740], ["backward", 1, 1740]]
STEP_S = 0.05
LATENCY_S = 0.02


class Recorded(SettingsGuard):
    """A guard that notes when, at what clock and on which thread each clock lock was made."""

    def __init__(self, path: Path, clock: VirtualClock | None = None) -> None:
        super().__init__(path)
        self.locks: list[tuple[float, int, str]] = []
        self._virtual = clock

    def lock_sm_clocks(self, device: object, min_mhz: int, max_mhz: int) -> None:  # type: ignore[override]
        self.locks.append(((self._virtual or (lambda: 0.0))(), min_mhz, threading.current_thread().name))
        super().lock_sm_clocks(device, min_mhz, max_mhz)  # type: ignore[arg-type]


def run_iterations(controller: FrequencyController, clock: VirtualClock, iterations: int) -> list[float]:
    """Each instruction's start time; each lasts STEP_S."""
    starts = []
    for _ in range(iterations):
        for step in controller.plan:
            controller.before(step.instruction, step.microbatch)
            starts.append(clock())
            clock.sleep(STEP_S)
    return starts


def test_a_faster_clock_is_asked_for_ahead_and_a_slower_one_at_its_instruction(tmp_path: Path) -> None:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, clock=clock, sleep=clock.sleep, physics=Physics.ideal())
    with Recorded(tmp_path, clock) as guard:
        controller = FrequencyController(stage_plan(PLAN), gpu, guard, clock_change_s=LATENCY_S, timer=clock.call_later)
        starts = run_iterations(controller, clock, 3)
        locks = guard.locks
    # Second iteration on (the first one's instruction times are known): the switch up to 1740 MHz comes
    # AHEAD_CHANGES latencies before backward 0, the switch down to 990 MHz at forward 0's start.
    up = [t for t, mhz, _ in locks if mhz == 1740 and t > starts[4]]
    down = [t for t, mhz, _ in locks if mhz == 990 and t > starts[4]]
    assert up[0] == pytest.approx(starts[6] - AHEAD_CHANGES * LATENCY_S)
    assert down[0] == pytest.approx(starts[8])
    assert controller.applied[:4] == [
        ("forward", 0, 990),
        ("forward", 1, 990),
        ("backward", 0, 1740),
        ("backward", 1, 1740),
    ]


def test_without_a_latency_each_clock_is_locked_at_its_instruction(tmp_path: Path) -> None:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, clock=clock, sleep=clock.sleep, physics=Physics.ideal())
    with Recorded(tmp_path, clock) as guard:
        controller = FrequencyController(stage_plan(PLAN), gpu, guard, timer=clock.call_later)
        starts = run_iterations(controller, clock, 2)
    assert [t for t, _, _ in guard.locks] == [starts[0], starts[2], starts[4], starts[6]]


def test_in_the_background_the_clock_calls_leave_the_training_thread(tmp_path: Path) -> None:
    gpu = SimulatedGPU(0, physics=Physics.ideal())
    with Recorded(tmp_path) as guard:
        controller = FrequencyController(stage_plan(PLAN), gpu, guard, clock_change_s=LATENCY_S, background=True)
        for step in controller.plan:
            controller.before(step.instruction, step.microbatch)
        controller.settle()
        assert gpu.locked_sm_clocks_mhz() == (1740, 1740)
        controller.close()
    threads = {name for _, _, name in guard.locks}
    assert threads == {"wattwise-clock-setter"}
    assert gpu.locked_sm_clocks_mhz() is None
