"""GPU generations the realistic simulated GPU can stand for: each one's clocks, counter, readings, settling.

Chosen by `devices.simulated_gpu` or `$WATTWISE_SIMULATED_GPU` (`h100`, the default, `a100`, `v100`,
`mi300x`). Each parameter names its source in `SOURCES`: a measurement of this project's (the H100 report,
docs/acceptance/h100-2026-11-25.md), a public profile (the Perseus SOSP'24 artifact's per-stage profiles
of GPT-3 on A100 SXM and Bloom on A40), a published paper, the vendor's reference, or "assumed" where
nothing measured exists yet (the acceptance's real-GPU run measures those: clock-switch latency,
power-limit settling, the counter's period and the clock curve's shape).

The clock curves (`ClockModel`'s linear share, transition and exponent) were fitted by least squares
(`benchmarks/clock_fit.py`): A100 to the Perseus GPT-3 175B profile (38 clocks, 855-1410 MHz, power
above the artifact's blocking power of 83.64 W; residual 4.5 W rms), H100 through the report's three
locked-clock points (345 MHz: 192 W; 1155 MHz: 510 W; and the 1980 MHz point, held at the 700 W limit,
which ran at the speed of 1373 MHz), with the A100's exponent and an idle tenth of the power at the
maximum clock (assumed). Both curves make the lowest clock dearer per step than the middle ones, as the
data do: the H100's 345 MHz cost 27% more energy per step than its 1155 MHz, the A100's cheapest clock
in the profile is 1080 MHz, 77% of its maximum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wattwise.devices.base import PresetDescription
from wattwise.devices.simulated.models import ClockModel
from wattwise.vocabulary import PowerReading, SimulatedGpuName

#: The share of a training step that does not speed up with the SM clock, for every preset: fitted to the
#: Perseus A100 GPT-3 profile (0.23; the H100 report's matrix products are compute-bound, about 0).
TRAINING_MEMORY_BOUND = 0.23

PERSEUS_A100 = "Perseus SOSP'24 artifact, stage_profile/gpt3-175b+a100_sxm_bf16.csv (fitted)"
H100_REPORT = "docs/acceptance/h100-2026-11-25.md"
NVML_POWER = (
    "NVML reference, nvmlDeviceGetPowerUsage: averaged over 1 s on Ampere (except GA100) and newer, "
    "instantaneous on GA100 and older"
)
YANG_SC24 = "Yang et al., SC'24 (part-time power measurements): A100/H100 update every 100 ms, V100 every 20 ms"
SINHA_SC22 = 'Sinha et al., "Not All GPUs Are Created Equal", SC\'22: 8% mean, up to 22% within one SKU'


@dataclass(frozen=True)
class GpuPreset:
    """One GPU generation's parameters for the realistic physics. Seconds, MHz, fractions."""

    name: SimulatedGpuName
    #: The GPU it stands for, in words.
    label: str
    #: Its SM clocks and the shape of time and power against them.
    clock: ClockModel
    #: Mean time between two changes of the energy counter, and the jitter of each period.
    energy_update_period_s: float
    energy_update_jitter_s: float
    #: Median and 90th percentile of one energy-counter read.
    energy_read_median_s: float
    energy_read_p90_s: float
    #: `power_w`'s averaging window (0: the power at that moment), and what that means in words.
    power_window_s: float
    power_reading: PowerReading
    #: Time constant of a new power limit (the firmware's closed loop) reaching its effect.
    power_limit_settle_s: float
    #: Time constant of a locked clock (set open loop) reaching its effect, and how long the call takes.
    clock_settle_s: float
    clock_set_s: float
    #: Relative standard deviation between GPUs of the power one needs for the same work.
    gpu_spread: float
    #: Where each parameter comes from (parameter -> source).
    sources: dict[str, str] = field(default_factory=dict)

    def describe(self) -> PresetDescription:
        """The preset for `wattwise devices --json`: its name, what it stands for, its cited parameters."""
        return {
            "name": self.name.value,
            "label": self.label,
            "sm_clock_range_mhz": [self.clock.min_mhz, self.clock.max_mhz],
            "energy_update_period_s": self.energy_update_period_s,
            "energy_read_median_s": self.energy_read_median_s,
            "power_reading": self.power_reading.value,
            "power_window_s": self.power_window_s,
            "power_limit_settle_s": self.power_limit_settle_s,
            "clock_settle_s": self.clock_settle_s,
            "clock_set_s": self.clock_set_s,
            "gpu_spread": self.gpu_spread,
            "sources": dict(self.sources),
        }


def _nvidia_common(
    counter: str,
    reading: str,
    curve: str,
    clocks: str,
    read: str = H100_REPORT + " (500 reads, H100)",
    jitter: str = "assumed (+- 10 ms)",
) -> dict[str, str]:
    return {
        "clock": clocks,
        "clock_curve": curve,
        "memory_bound_fraction": PERSEUS_A100,
        "energy_update_period_s": counter,
        "energy_update_jitter_s": jitter,
        "energy_read_s": read,
        "power_reading": reading,
        "power_limit_settle_s": "assumed (0.1 s); the H100 report's 1 s wait bounds it from above",
        "clock_settle_s": "assumed (10 ms); measured by the acceptance's clock-switch check",
        "clock_set_s": "assumed (2 ms); measured by the acceptance's clock-switch check",
        "gpu_spread": SINHA_SC22 + " (3% standard deviation, at most 3.5 of them)",
    }


#: Shared by every preset: GPUs of one node differ in the power they need for the same work (Sinha et al.).
GPU_SPREAD = 0.03


def _clocks(
    max_mhz: int, min_mhz: int, step_mhz: int = 15, *, linear_share: float = 0.632, transition: float = 0.764
) -> ClockModel:
    """A GPU's SM clocks with a training step's memory-bound share and the A100's exponent.

    The curve's shape is the A100's (fitted to Perseus) unless the GPU has its own fit.
    """
    return ClockModel(
        max_mhz=max_mhz,
        min_mhz=min_mhz,
        step_mhz=step_mhz,
        memory_bound_fraction=TRAINING_MEMORY_BOUND,
        linear_share=linear_share,
        transition=transition,
        power_exponent=1.178,
    )


def _preset(
    name: SimulatedGpuName,
    label: str,
    clock: ClockModel,
    *,
    energy_update_period_s: float,
    energy_update_jitter_s: float,
    sources: dict[str, str],
    power_reading: PowerReading = PowerReading.INSTANTANEOUS,
    power_window_s: float = 0.0,
) -> GpuPreset:
    """A preset whose counter reads, settling and clock-setting calls take what the H100's do (measured or assumed)."""
    return GpuPreset(
        name=name,
        label=label,
        clock=clock,
        energy_update_period_s=energy_update_period_s,
        energy_update_jitter_s=energy_update_jitter_s,
        energy_read_median_s=0.00281,
        energy_read_p90_s=0.00574,
        power_window_s=power_window_s,
        power_reading=power_reading,
        power_limit_settle_s=0.1,
        clock_settle_s=0.010,
        clock_set_s=0.002,
        gpu_spread=GPU_SPREAD,
        sources=sources,
    )


PRESETS: dict[SimulatedGpuName, GpuPreset] = {
    SimulatedGpuName.H100: _preset(
        SimulatedGpuName.H100,
        "NVIDIA H100 SXM (Hopper)",
        _clocks(1980, 345, linear_share=0.318, transition=0.430),
        energy_update_period_s=0.100,
        energy_update_jitter_s=0.010,
        power_window_s=1.0,
        power_reading=PowerReading.AVERAGED,
        sources=_nvidia_common(
            counter=H100_REPORT + ": 21 values in 2 s are 20 changes (100 ms); benchmarks/nvml_calls.py: 10.0/s",
            reading=NVML_POWER,
            curve=H100_REPORT + " (three locked-clock points; the A100's exponent; idle assumed a tenth)",
            clocks=H100_REPORT + " (110 clocks, 345-1980 MHz)",
        ),
    ),
    SimulatedGpuName.A100: _preset(
        SimulatedGpuName.A100,
        "NVIDIA A100 SXM (Ampere GA100)",
        _clocks(1410, 210),
        energy_update_period_s=0.100,
        energy_update_jitter_s=0.010,
        sources=_nvidia_common(
            counter=YANG_SC24,
            reading=NVML_POWER,
            curve=PERSEUS_A100,
            clocks=PERSEUS_A100 + " (top 1410 MHz); the lowest, 210 MHz, assumed",
            read="assumed: the H100's (" + H100_REPORT + ")",
        ),
    ),
    SimulatedGpuName.V100: _preset(
        SimulatedGpuName.V100,
        "NVIDIA V100 SXM2 (Volta)",
        _clocks(1530, 135),
        energy_update_period_s=0.020,
        energy_update_jitter_s=0.002,
        sources=_nvidia_common(
            counter=YANG_SC24,
            reading=NVML_POWER,
            curve="assumed: the A100's (" + PERSEUS_A100 + ")",
            clocks="assumed: 135-1530 MHz in 15 MHz steps (the driver lists finer ones)",
            read="assumed: the H100's (" + H100_REPORT + ")",
            jitter="assumed (+- 2 ms)",
        ),
    ),
    SimulatedGpuName.MI300X: _preset(
        SimulatedGpuName.MI300X,
        "AMD Instinct MI300X (CDNA 3)",
        _clocks(2100, 500, 25),
        energy_update_period_s=0.001,
        energy_update_jitter_s=0.0,
        sources=_nvidia_common(
            counter="assumed (1 ms): AMD's energy accumulator counts in 15.3 uJ steps, far finer than NVML's",
            reading="assumed: amdsmi's current socket power, instantaneous",
            curve="assumed: the A100's (" + PERSEUS_A100 + ")",
            clocks="AMD's MI300X data sheet (2100 MHz peak engine clock); the lowest, 500 MHz, assumed",
            read="assumed: the H100's NVML read (" + H100_REPORT + ")",
            jitter="assumed (none)",
        ),
    ),
}

#: The preset of the realistic physics when none is named.
DEFAULT_GPU = SimulatedGpuName.H100
