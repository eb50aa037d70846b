"""What runs inside the Hugging Face Trainer of the lever checks: the emulated trainer, the sweep, the tuner.

This module imports `transformers` (its classes subclass the Trainer's), so only a check imports it, when
it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from typing_extensions import override

from wattwise.devices.base import Device, DeviceError
from wattwise.monitor import EnergyMonitor, counter_window_uncertainty_j
from wattwise.tools.levers_common import ALIGN_PERIODS, MIN_WINDOW_STEPS, SETTLE_STEPS, TUNE_RUN_LIMIT_S, Sizes
from wattwise.tools.levers_figures import CapWindow
from wattwise.vocabulary import SweepPhase

if TYPE_CHECKING:
    from wattwise.run import Run
    from wattwise.settings.guard import SettingsGuard


class EmulatedTrainer(Trainer):
    """On the simulated GPU a step lasts its modelled time (`base_time_s`); on a real GPU it just runs."""

    def __init__(self, gpus: Sequence[Device], base_time_s: float | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gpus, self.base_time_s = list(gpus), base_time_s

    @override
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        from wattwise.tools.workload import emulate_step

        work = super().training_step
        return emulate_step(self.gpus, lambda: work(*args, **kwargs), base_time_s=self.base_time_s)


class SweepCallback(TrainerCallback):
    """Train at each cap in turn: apply, settle, then one window that opens and ends on a change of the counter.

    Aligned so, each end of a window is within one training step of a change of a coarse counter rather
    than anywhere within its period (`counter_window_uncertainty_j`). A counter that does not change
    within `ALIGN_PERIODS` periods is not waited for: that window is not aligned, and says so by the
    monitor's wider uncertainty. With `profile`, a last window at the first cap (the default limit) with
    that NVML workload power profile requested; a refused request ends the sweep there, its words in
    `refused`. Each window measured is appended to `results`.
    """

    def __init__(
        self,
        gpu: Device,
        sync: Callable[[], None],
        guard: SettingsGuard,
        caps_w: Sequence[float],
        sizes: Sizes,
        results: list[CapWindow],
        profile: str | None = None,
        refused: list[str] | None = None,
    ) -> None:
        self.gpu, self.guard, self.sizes, self.results, self.refused = gpu, guard, sizes, results, refused
        self.window_s = sizes.window_s(gpu)
        self.monitor = EnergyMonitor([gpu], sync=sync)
        self.clock = gpu.simulation.clock if gpu.simulation is not None else time.monotonic
        self.period_s = gpu.energy_update_period_s
        self.items: list[tuple[float, str | None]] = [(cap, None) for cap in caps_w]
        if profile is not None:
            self.items.append((caps_w[0], profile))
        self.index = 0
        self.phase = SweepPhase.APPLY
        self.since = 0.0
        self.steps = 0
        self.edge_j: float | None = None
        self.waiting_since = 0.0
        self.aligned = True

    def counter_changed(self) -> bool:
        """Whether the counter changed since the last look (True, and no more waiting, when it cannot say)."""
        if self.period_s <= 0:
            return True
        try:
            value = self.gpu.energy_j()
        except DeviceError:
            self.aligned = False
            return True
        changed = self.edge_j is not None and value != self.edge_j
        self.edge_j = value
        if not changed and self.clock() - self.waiting_since > ALIGN_PERIODS * self.period_s:
            self.aligned = False
            return True
        return changed

    @override
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.phase != SweepPhase.APPLY:
            return
        cap, wanted = self.items[self.index]
        self.guard.set_power_limit(self.gpu, cap)
        if wanted is not None:
            try:
                self.guard.request_workload_power_profiles(self.gpu, [wanted])
            except DeviceError as err:  # the caps are measured: the sweep ends without this row
                if self.refused is not None:
                    self.refused.append(str(err))
                control.should_training_stop = True
                self.phase = SweepPhase.DONE
                return
        self.phase, self.since, self.steps = SweepPhase.SETTLE, self.clock(), 0

    @override
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.steps += 1
        elapsed = self.clock() - self.since
        if self.phase == SweepPhase.SETTLE and elapsed >= self.sizes.settle_s and self.steps >= SETTLE_STEPS:
            self.phase, self.edge_j, self.waiting_since, self.aligned = SweepPhase.ALIGN, None, self.clock(), True
            self.counter_changed()  # the counter's value now, to see the step in which it changes
        elif self.phase == SweepPhase.ALIGN and self.counter_changed():
            self.monitor.begin_window("cap")
            self.phase, self.since, self.steps = SweepPhase.MEASURE, self.clock(), 0
        elif self.phase == SweepPhase.MEASURE and elapsed >= self.window_s and self.steps >= MIN_WINDOW_STEPS:
            self.phase, self.edge_j, self.waiting_since = SweepPhase.CLOSING, None, self.clock()
            self.counter_changed()
        elif self.phase == SweepPhase.CLOSING and self.counter_changed():
            self._close_window(control)

    def _close_window(self, control: TrainerControl) -> None:
        """End the cap's window, keep its figures per step, and move on to the next cap (or stop)."""
        window = self.monitor.end_window("cap")
        steps = self.steps
        cap, wanted = self.items[self.index]
        uncertainty_j = (
            counter_window_uncertainty_j(window.total_energy_j, window.time_s, self.period_s, aligned_steps=steps)
            if self.aligned
            else window.total_energy_uncertainty_j
        )
        self.results.append(
            CapWindow(cap, window.time_s / steps, window.total_energy_j / steps, steps, uncertainty_j / steps, wanted)
        )
        self.index += 1
        self.phase = SweepPhase.APPLY
        if self.index == len(self.items):
            control.should_training_stop = True

    def close(self) -> None:
        """Close the measurement windows (on every exit path of the sweep)."""
        self.monitor.close()


class TuneCallback(TrainerCallback):
    """Drive a wattwise `Run` from the Trainer's hooks, until tuning ended and its limit trained `after` steps.

    Also stops when tuning was abandoned (no tuner any more), the run stopped measuring, or after
    `TUNE_RUN_LIMIT_S` on `clock`.
    """

    def __init__(self, run: Run, after: int, clock: Callable[[], float]) -> None:
        self.run, self.after, self.clock = run, after, clock
        self.start = clock()

    @override
    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.start()

    @override
    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.step_begin()

    @override
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self.run.step_end()
        power = self.run.power
        done = power.tuner is None or (power.tuner.done and power.steps_at_chosen >= self.after)
        if done or not self.run.measuring or self.clock() - self.start > TUNE_RUN_LIMIT_S:
            control.should_training_stop = True

    @override
    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.run.finish()
