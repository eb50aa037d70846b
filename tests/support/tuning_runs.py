"""A power-limit tuning run on one simulated GPU timed by a virtual clock, as unit tests drive one.

`tuning_run(tmp_path, steps)` makes a `Run` in mode "tune" (the profile of `SMALL_PROFILE` unless the
caller gives other overrides), makes `steps` optimizer steps driven by emulated work (or, with
`drive=False`, steps of a user's own model, during which the simulated GPU idles), optionally records a
SIGTERM as the guard would before the end, and finishes the run. It returns the run, its GPU and the
wattwise warnings it gave.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning
from wattwise.run import Run
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.workload import emulate_step

#: 300 W down to 100 W by 50 W: 5 limits, 1 wait step, 1 warm-up step and 2 profile steps each.
SMALL_PROFILE = (
    "monitor.sample_power=false",
    "monitor.sync_cuda=false",
    "power_limit.mode=tune",
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
)
#: Optimizer steps `SMALL_PROFILE` takes to profile every limit.
SMALL_PROFILE_STEPS = 1 + 5 * (1 + 2)
#: The same limits with no wait or warm-up step: every step from the first is a profile step (the carbon-aware
#: runs, whose limit follows the intensity step by step).
NO_WAIT_PROFILE = (
    "power_limit.mode=tune",
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=0",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
    "monitor.sample_power=false",
    "monitor.sync_cuda=false",
)


@dataclass
class TuningRun:
    """What `tuning_run` leaves: the run, its simulated GPU and the wattwise warnings it gave."""

    run: Run
    gpu: SimulatedGPU
    said: list[str]


def tuning_run(
    tmp_path: Path,
    steps: int,
    *,
    overrides: Sequence[str] = SMALL_PROFILE,
    physics: Physics | None = None,
    base_step_time_s: float = 0.1,
    drive: bool = True,
    signalled: bool = False,
    stop: Callable[[Run], bool] | None = None,
    clock_start_s: float = 1000.0,
    announce_steps: bool = False,
) -> TuningRun:
    """Tune for `steps` optimizer steps (fewer when `stop(run)` says so after a step), then finish.

    Args:
        tmp_path: Where the run writes (`run/`) and journals (`journal/`).
        steps: Optimizer steps at most.
        overrides: The configuration's overrides (`output_dir` is added).
        physics: The simulated GPU's physics (None: its default for the tests, the ideal one).
        base_step_time_s: A step's time at the highest limit.
        drive: Emulated work drives the GPU; False: the user's own model, the GPU idles.
        signalled: SIGTERM reaches the run before it finishes, as the guard records it.
        stop: Ends the steps early when it returns True after a step.
        clock_start_s: The virtual clock's first reading (unix s: a date for a carbon-intensity series).
        announce_steps: Tell the run its length (`Run.expect_steps`), as a framework that knows it does.
    """
    clock = VirtualClock(clock_start_s)
    gpu = SimulatedGPU(
        0,
        PowerModel.default(),
        base_step_time_s=base_step_time_s,
        clock=clock,
        sleep=clock.sleep,
        physics=physics,
    )
    cfg = load_config(overrides=[*overrides, f"output_dir={tmp_path / 'run'}"])
    run = Run(
        cfg, devices=[gpu], wall_clock=clock, settings_guard=lambda: SettingsGuard(tmp_path / "journal", recover=False)
    )
    if announce_steps:
        run.expect_steps(steps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        for _ in range(steps):
            run.step_begin()
            if drive:
                emulate_step([gpu], lambda: None)
            else:
                clock.sleep(base_step_time_s)  # the user's own model: time passes, the simulated GPU idles
            run.step_end()
            if stop is not None and stop(run):
                break
        if signalled:
            guard = run.power.guard
            assert guard is not None
            guard.signalled = signal.SIGTERM
            guard.restore_all()
        run.finish()
    said = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    return TuningRun(run, gpu, said)
