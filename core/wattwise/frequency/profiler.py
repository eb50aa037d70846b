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

It also measures, per stage, how long a change of the SM clock takes to act (`clock_change_s`): from the
call that locks the lowest profiled clock, after running at the highest, until the first of three
instructions in a row whose time is within `SETTLED_WITHIN` of its settled time at the new clock starts
(midway between its start and the one before: to half an instruction's time; `LATENCY_WINDOW_S` of
instructions; the median of `LATENCY_REPEATS` such changes). The planner makes no frequency segment
shorter than the GPU can follow, and the controller changes the clock ahead of the instruction that
needs it.

On the simulated GPU (no GPU on this machine) the figures follow its clock model, and the profile's
`source` says "simulated".
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wattwise.devices.base import Device
from wattwise.errors import UsageError
from wattwise.monitor import EnergyMonitor
from wattwise.pipeline.profiles import FrequencyOption, PipelineProfile
from wattwise.pipeline.schedule import FORWARD, INSTRUCTIONS, Instruction
from wattwise.settings.guard import SettingsGuard


@dataclass(frozen=True)
class StageWork:
    """One stage: its GPU, and callables that run one microbatch's forward or backward on it."""

    device: Device
    forward: Callable[[], object]
    backward: Callable[[], object]

    def run(self, instruction: Instruction) -> None:
        """Run one microbatch's forward or backward on the stage."""
        (self.forward if instruction == FORWARD else self.backward)()


class PipelineProfiler:
    """Profiles every stage at every frequency (see the module docstring).

    `frequencies_mhz` defaults to every SM clock each device supports; `sync` (e.g.
    `torch.cuda.synchronize`) is called at both ends of each measurement window. `min_window_s` is the
    shortest measurement window (None: 20 updates of the device's energy counter and at least
    `MIN_WINDOW_S`, 0 for an exact one);
    `max_profile_s` bounds the whole profiling (None: no bound), shortening the windows to fit.
    """

    #: A measurement window spans at least this many updates of the energy counter (as power-limit tuning's).
    MIN_UPDATES = 20
    #: And at least this many seconds on a counter that changes in steps: on a fine one (1 ms), 20 updates
    #: would hold a few instructions, and the counter reads (milliseconds each) would weigh in the window.
    MIN_WINDOW_S = 1.0
    #: Seconds of instructions run after a clock change to find when it acted (at least 20 instructions).
    LATENCY_WINDOW_S = 0.5
    #: Clock changes measured per stage (their median is the latency).
    LATENCY_REPEATS = 3
    #: An instruction's time counts as settled within this share of the settled time at the new clock.
    SETTLED_WITHIN = 0.05

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
        period_s = max(stage.device.energy_update_period_s for stage in self.stages)
        wanted_s = (
            min_window_s
            if min_window_s is not None
            else max(self.MIN_UPDATES * period_s, self.MIN_WINDOW_S if period_s > 0 else 0.0)
        )
        measurements = sum(len(f) for f in self.frequencies_mhz) * len(INSTRUCTIONS)
        #: How long each (instruction, clock) measurement lasts at least, in seconds.
        latency_s = self.LATENCY_WINDOW_S * self.LATENCY_REPEATS * len(self.stages)
        self.window_s = (
            wanted_s if max_profile_s is None else min(wanted_s, max(0.0, max_profile_s - latency_s) / measurements)
        )

    def estimated_s(self) -> float:
        """About how long `measure` takes, in seconds: every measurement's window (warm-up and alignment aside).

        A window lasts `window_s` or `iterations` instructions, whichever is longer; this counts `window_s`,
        and `LATENCY_WINDOW_S` per clock change measured (`LATENCY_REPEATS` per stage).
        """
        windows_s = self.window_s * sum(len(f) for f in self.frequencies_mhz) * len(INSTRUCTIONS)
        return windows_s + self.LATENCY_WINDOW_S * self.LATENCY_REPEATS * len(self.stages)

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
        latencies: dict[int, float] = {}
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
                latencies[index] = statistics.median(
                    self._clock_change_s(stage, self.frequencies_mhz[index]) for _ in range(self.LATENCY_REPEATS)
                )
            finally:
                self.guard.reset_sm_clocks(stage.device)
                monitor.close()
            for instruction in INSTRUCTIONS:
                measurements[(index, instruction)] = tuple(rows[instruction])
        simulated = any(stage.device.simulated for stage in self.stages)
        source = "simulated GPU profile" if simulated else "measured profile"
        return PipelineProfile(measurements, source=source, clock_change_s=latencies)

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

    def _clock_change_s(self, stage: StageWork, frequencies_mhz: Sequence[int]) -> float:
        """How long a change from the highest to the lowest of `frequencies_mhz` takes to act (module docstring)."""
        return clock_change_s(
            stage.device,
            lambda: stage.run("forward"),
            self.guard,
            (max(frequencies_mhz), min(frequencies_mhz)),
            sync=self.sync,
            window_s=self.LATENCY_WINDOW_S,
            within=self.SETTLED_WITHIN,
        )

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


def clock_change_s(
    device: Device,
    work: Callable[[], object],
    guard: SettingsGuard,
    clocks_mhz: tuple[int, int],
    *,
    sync: Callable[[], None] | None = None,
    window_s: float = PipelineProfiler.LATENCY_WINDOW_S,
    within: float = PipelineProfiler.SETTLED_WITHIN,
) -> float:
    """Seconds from the call that locks `clocks_mhz[1]` (after running at `clocks_mhz[0]`) until it acts.

    Until the first of three runs of `work` in a row whose time is within `within` of its settled time at
    the new clock starts, taken midway between that run's start and the one before (to half a run's
    time), over `window_s` of runs (20 at least).
    """
    sim = device.simulation
    clock = sim.clock if sim is not None else time.monotonic
    high, low = clocks_mhz
    guard.lock_sm_clocks(device, high, high)
    for _ in range(3):
        work()
    if sync is not None:
        sync()
    called = clock()
    guard.lock_sm_clocks(device, low, low)
    starts: list[float] = []
    took: list[float] = []
    while len(took) < 20 or clock() - called < window_s:
        start = clock()
        work()
        if sync is not None:
            sync()
        starts.append(start)
        took.append(clock() - start)
    settled = statistics.median(took[len(took) // 2 :])
    near = [abs(t - settled) <= within * settled for t in took]
    for i in range(len(took) - 2):
        if all(near[i : i + 3]):  # it acted after the last unsettled run's start and by this one's: midway
            return max(0.0, (starts[i - 1] + starts[i]) / 2 - called) if i > 0 else 0.0
    return starts[-1] - called
