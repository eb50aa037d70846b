"""Measure a pipeline profile: each stage's forward and backward at each SM frequency, on its own GPU.

This is measurement code, not decision code: it locks clocks through the settings guard (which records
the original and restores it on every exit path) and reads energy through measurement windows
(`wattwise.monitor.EnergyMonitor`). For each stage, each frequency and each instruction it runs `warmup`
unmeasured microbatches, then at least `iterations` measured ones, and keeps the mean time and energy of one
microbatch: exactly the rows of a `stage,instruction,frequency,time,energy` CSV.

An energy counter that changes in steps (every 0.1 s on NVML and on the realistic simulated H100)
cannot measure one 2-6 ms instruction: each measurement therefore repeats the instruction until its window
spans 20 of the counter's updates (`window_s`), and begins and ends on an instruction in which the counter
changed, so that the counter's steps fall within one instruction of the window's ends. Profiling then takes
about `estimated_s()`: stages x frequencies x 2 instructions x 20 updates (about 1.9 s each: 2 minutes for
two stages at 16 clocks); `max_profile_s` bounds it, at the cost of shorter windows.

On the simulated GPU (no GPU on this machine) the figures follow its clock model, and the profile's
`source` says "simulated".
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wattwise.devices.base import Device
from wattwise.errors import UsageError
from wattwise.monitor import EnergyMonitor
from wattwise.pipeline.profiles import FrequencyOption, PipelineProfile
from wattwise.pipeline.schedule import INSTRUCTIONS, Instruction
from wattwise.settings.guard import SettingsGuard


@dataclass(frozen=True)
class StageWork:
    """One stage: its GPU, and callables that run one microbatch's forward or backward on it."""

    device: Device
    forward: Callable[[], object]
    backward: Callable[[], object]

    def run(self, instruction: Instruction) -> None:
        """Run one microbatch's forward or backward on the stage."""
        (self.forward if instruction == "forward" else self.backward)()


class PipelineProfiler:
    """Profiles every stage at every frequency (see the module docstring).

    `frequencies_mhz` defaults to every SM clock each device supports; `sync` (e.g.
    `torch.cuda.synchronize`) is called at both ends of each measurement window. `min_window_s` is the
    shortest measurement window (None: 20 updates of the device's energy counter, 0 for an exact one);
    `max_profile_s` bounds the whole profiling (None: no bound), shortening the windows to fit.
    """

    #: A measurement window spans at least this many updates of the energy counter (as power-limit tuning's).
    MIN_UPDATES = 20

    def __init__(
        self,
        stages: Sequence[StageWork],
        guard: SettingsGuard,
        *,
        frequencies_mhz: Sequence[int] | None = None,
        iterations: int = 3,
        warmup: int = 1,
        sync: Callable[[], None] | None = None,
        min_window_s: float | None = None,
        max_profile_s: float | None = None,
    ) -> None:
        if not stages:
            raise UsageError("the profiler needs at least one stage (a device and its forward and backward)")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise UsageError(f"iterations must be a positive integer (got {iterations!r})")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise UsageError(f"warmup must be an integer >= 0 (got {warmup!r})")
        for name, value in (("min_window_s", min_window_s), ("max_profile_s", max_profile_s)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise UsageError(f"{name} must be a number of seconds >= 0 (got {value!r})")
        self.stages = list(stages)
        self.guard = guard
        self.iterations = iterations
        self.warmup = warmup
        self.sync = sync
        self.frequencies_mhz = [self._frequencies(stage.device, frequencies_mhz) for stage in self.stages]
        self.max_profile_s = max_profile_s
        wanted_s = (
            min_window_s
            if min_window_s is not None
            else self.MIN_UPDATES * max(stage.device.energy_update_period_s for stage in self.stages)
        )
        measurements = sum(len(f) for f in self.frequencies_mhz) * len(INSTRUCTIONS)
        #: How long each (instruction, clock) measurement lasts at least, in seconds.
        self.window_s = wanted_s if max_profile_s is None else min(wanted_s, max_profile_s / measurements)

    def estimated_s(self) -> float:
        """About how long `measure` takes, in seconds: every measurement's window (warm-up and alignment aside).

        A window lasts `window_s` or `iterations` instructions, whichever is longer; this counts `window_s`.
        """
        return self.window_s * sum(len(f) for f in self.frequencies_mhz) * len(INSTRUCTIONS)

    @staticmethod
    def _frequencies(device: Device, wanted: Sequence[int] | None) -> list[int]:
        supported = device.supported_sm_clocks_mhz()
        if wanted is None:
            chosen = list(supported)
        else:
            unsupported = sorted(set(wanted) - set(supported))
            if unsupported:
                raise UsageError(
                    f"{device.key} does not support SM clocks {unsupported} MHz; pick from "
                    f"{supported[-1]}..{supported[0]} MHz (see wattwise devices)"
                )
            chosen = sorted(set(wanted), reverse=True)
        if len(chosen) < 2:
            raise UsageError(f"{device.key}: profile at least two frequencies to plan (got {chosen})")
        return chosen

    def measure(self, progress: Callable[[str], None] | None = None) -> PipelineProfile:
        """Run the measurements and return the profile; clocks are reset afterwards, even on error."""
        measurements: dict[tuple[int, Instruction], tuple[FrequencyOption, ...]] = {}
        for index, stage in enumerate(self.stages):
            monitor = EnergyMonitor([stage.device], sync=self.sync)
            rows: dict[Instruction, list[FrequencyOption]] = {ins: [] for ins in INSTRUCTIONS}
            try:
                for freq in self.frequencies_mhz[index]:
                    self.guard.lock_sm_clocks(stage.device, freq, freq)
                    for instruction in INSTRUCTIONS:
                        rows[instruction].append(self._measure_one(monitor, stage, instruction, freq))
                    if progress is not None:
                        progress(f"stage {index} at {freq} MHz")
            finally:
                self.guard.reset_sm_clocks(stage.device)
                monitor.close()
            for instruction in INSTRUCTIONS:
                measurements[(index, instruction)] = tuple(rows[instruction])
        simulated = any(stage.device.simulated for stage in self.stages)
        source = "simulated GPU profile" if simulated else "measured profile"
        return PipelineProfile(measurements, source=source)

    def _measure_one(
        self,
        monitor: EnergyMonitor,
        stage: StageWork,
        instruction: Instruction,
        freq: int,
    ) -> FrequencyOption:
        for _ in range(self.warmup):
            stage.run(instruction)
        device = stage.device
        coarse = self.window_s > 0 and device.energy_update_period_s > 0
        sim = device.simulation
        clock = sim.clock if sim is not None else time.monotonic  # the monitor's clock
        if coarse:  # begin just after the counter changed
            self._until_counter_changes(stage, instruction, clock=lambda: 0.0)
        name = f"{instruction}@{freq}"
        monitor.begin_window(name)
        start = clock()
        count, reads_s = 0, 0.0
        try:
            while count < self.iterations or clock() - start < self.window_s:
                stage.run(instruction)
                count += 1
            if coarse:  # end on an instruction in which the counter changed
                ran, reads_s = self._until_counter_changes(stage, instruction, clock=clock)
                count += ran
        except BaseException:
            monitor.cancel_window(name)
            raise
        window = monitor.end_window(name)
        # The reads that found the window's end are no instruction's time (their energy is the GPU's idle
        # power for that time: under 1% of the window's on the realistic simulated GPU).
        return FrequencyOption(freq, (window.time_s - reads_s) / count, window.total_energy_j / count)

    def _until_counter_changes(
        self, stage: StageWork, instruction: Instruction, *, clock: Callable[[], float], most: int = 100_000
    ) -> tuple[int, float]:
        """Run `instruction` until the stage's energy counter changes.

        Returns:
            How many times it ran, and the seconds spent reading the counter after each.
        """
        device = stage.device
        before = device.energy_j()
        reads_s = 0.0
        for ran in range(1, most + 1):
            stage.run(instruction)
            if self.sync is not None:
                self.sync()
            read_at = clock()
            changed = device.energy_j() != before
            reads_s += clock() - read_at
            if changed:
                return ran, reads_s
        return most, reads_s
