"""Measure a pipeline profile: each stage's forward and backward at each SM frequency, on its own GPU.

This is measurement code, not decision code: it locks clocks through the settings guard (which records
the original and restores it on every exit path) and reads energy through measurement windows
(`wattwise.monitor.EnergyMonitor`). For each stage, each frequency and each instruction it runs `warmup`
unmeasured microbatches, then `iterations` measured ones, and keeps the mean time and energy of one
microbatch: exactly the rows of a `stage,instruction,frequency,time,energy` CSV.

On the simulated GPU (no GPU on this machine) the figures follow its clock model, and the profile's
`source` says "simulated".
"""

from __future__ import annotations

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
    `torch.cuda.synchronize`) is called at both ends of each measurement window.
    """

    def __init__(
        self,
        stages: Sequence[StageWork],
        guard: SettingsGuard,
        *,
        frequencies_mhz: Sequence[int] | None = None,
        iterations: int = 3,
        warmup: int = 1,
        sync: Callable[[], None] | None = None,
    ) -> None:
        if not stages:
            raise UsageError("the profiler needs at least one stage (a device and its forward and backward)")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise UsageError(f"iterations must be a positive integer (got {iterations!r})")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise UsageError(f"warmup must be an integer >= 0 (got {warmup!r})")
        self.stages = list(stages)
        self.guard = guard
        self.iterations = iterations
        self.warmup = warmup
        self.sync = sync
        self.frequencies_mhz = [self._frequencies(stage.device, frequencies_mhz) for stage in self.stages]

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
        name = f"{instruction}@{freq}"
        monitor.begin_window(name)
        try:
            for _ in range(self.iterations):
                stage.run(instruction)
        except BaseException:
            monitor.cancel_window(name)
            raise
        window = monitor.end_window(name)
        return FrequencyOption(freq, window.time_s / self.iterations, window.total_energy_j / self.iterations)
