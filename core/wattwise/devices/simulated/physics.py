"""How a simulated GPU departs from its model, as a real one does: the physics it follows.

`Physics.ideal()` departs in nothing (exact figures, for unit tests); `Physics.realistic()` has a counter
that advances in steps, reads that take time, settings that settle and noise, with parameters from
measured devices, per GPU generation (`presets`). `Physics.named` chooses one from `devices.simulated_physics`
or `$WATTWISE_SIMULATED_PHYSICS`, and the generation from `devices.simulated_gpu` or `$WATTWISE_SIMULATED_GPU`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from wattwise.copying import attributes
from wattwise.devices.simulated.models import ClockModel
from wattwise.devices.simulated.presets import DEFAULT_GPU, PRESETS, GpuPreset
from wattwise.errors import UsageError
from wattwise.vocabulary import PhysicsName, SimulatedGpuName

#: Chooses the simulated GPU's physics for every entry point at once (`realistic` or `ideal`).
PHYSICS_ENV = "WATTWISE_SIMULATED_PHYSICS"
#: Fixes the realistic physics' noise (an integer); unset, each run differs, as hardware does.
SEED_ENV = "WATTWISE_SIMULATED_SEED"
#: Chooses the GPU generation the realistic physics stands for (`h100`, `a100`, `v100`, `mi300x`).
GPU_ENV = "WATTWISE_SIMULATED_GPU"
#: Turns the realistic physics' temperature on (`on`) or off (`off`, the default).
TEMPERATURE_ENV = "WATTWISE_SIMULATED_TEMPERATURE"
#: The realistic physics' parameters that are its preset's, under the same names.
_FROM_PRESET = (
    "energy_update_period_s",
    "energy_update_jitter_s",
    "energy_read_median_s",
    "energy_read_p90_s",
    "gpu_spread",
    "power_window_s",
    "clock_settle_s",
    "clock_set_s",
)


@dataclass(frozen=True)
class Physics:
    """How a simulated GPU departs from its power model, as a real one does. Seconds and fractions.

    `ideal()` departs in nothing. `realistic()` takes its parameters from a GPU generation's preset
    (`wattwise.devices.simulated.presets`), each cited there and in docs/concepts.md: measured where there
    are measurements, "assumed" where not.
    """

    name: PhysicsName = PhysicsName.IDEAL
    #: Mean time between two changes of the energy counter (0: it changes at every read).
    energy_update_period_s: float = 0.0
    #: Each period is drawn uniformly within +- this of the mean.
    energy_update_jitter_s: float = 0.0
    #: Median time one energy-counter read takes (0: free).
    energy_read_median_s: float = 0.0
    #: 90th percentile of that time (log-normal between the two).
    energy_read_p90_s: float = 0.0
    #: Time constant with which a new power limit reaches its effect (the firmware's closed loop; 0: at once).
    settle_s: float = 0.0
    #: Relative standard deviation of one step's time, drawn per step.
    step_time_noise: float = 0.0
    #: Relative standard deviation of one step's busy power above idle, drawn per step.
    power_noise: float = 0.0
    #: Relative standard deviation between GPUs of the power one needs for the same work (fixed per GPU):
    #: it shows in busy power while no cap binds, and in time under a binding cap.
    gpu_spread: float = 0.0
    #: `power_w` averages the power over this window, in seconds (0: the power at that moment).
    power_window_s: float = 0.0
    #: Fixes the noise; None: it differs in every process.
    seed: int | None = None
    #: Time constant with which a locked clock reaches its effect (set open loop; 0: at once).
    clock_settle_s: float = 0.0
    #: How long a call that locks or resets the SM clock takes (0: free).
    clock_set_s: float = 0.0
    #: The GPU generation whose preset it follows (None: the ideal physics, the power model's own clocks).
    gpu: SimulatedGpuName | None = None
    #: Temperature: the rise above ambient (K) that full busy power reaches, its time constant, and the
    #: power needed for the same work per kelvin of rise (0: no temperature; `$WATTWISE_SIMULATED_TEMPERATURE`).
    temperature_rise_k: float = 0.0
    temperature_tau_s: float = 0.0
    power_per_k: float = 0.0

    @classmethod
    def ideal(cls) -> Physics:
        """Exact figures: the model, integrated at every read; for tests that need them."""
        return cls()

    @classmethod
    def realistic(
        cls, seed: int | None = None, gpu: SimulatedGpuName | str | None = None, *, temperature: bool | None = None
    ) -> Physics:
        """A physics like the GPU generation `gpu`'s (None: `$WATTWISE_SIMULATED_GPU`'s, else the H100's).

        Its counter, reads, power reading, settling and spread come from the preset (see
        `wattwise.devices.simulated.presets` for each parameter's source); the step-to-step noise (2% of
        time, 2% of power) is assumed, "a few per cent" (the H100 report's repeats agree within 0.5 ms per
        46-125 ms step over 44-step windows). `temperature` (None: `$WATTWISE_SIMULATED_TEMPERATURE`) adds a
        warming GPU: full busy power raises it 30 K with a 60 s time constant, and each kelvin asks 0.2% more
        power for the same work (assumed; energy per step rises as a GPU warms, which ML.ENERGY's profiling
        waits out on A100s).
        """
        preset = PRESETS[SimulatedGpuName(gpu) if gpu is not None else gpu_named()]
        if temperature is None:
            temperature = temperature_from_env()
        return cls(
            name=PhysicsName.REALISTIC,
            **attributes(preset, *_FROM_PRESET),
            settle_s=preset.power_limit_settle_s,
            step_time_noise=0.02,
            power_noise=0.02,
            seed=seed,
            gpu=preset.name,
            temperature_rise_k=30.0 if temperature else 0.0,
            temperature_tau_s=60.0 if temperature else 0.0,
            power_per_k=0.002 if temperature else 0.0,
        )

    @classmethod
    def named(cls, name: str | PhysicsName | None = None, seed: int | None = None, gpu: str | None = None) -> Physics:
        """The physics called `name`; None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic.

        The realistic physics' seed is `seed`, else `$WATTWISE_SIMULATED_SEED`, else none (noise differs);
        its GPU generation `gpu`, else `$WATTWISE_SIMULATED_GPU`, else h100; its temperature on when
        `$WATTWISE_SIMULATED_TEMPERATURE` is `on`.

        Raises:
            UsageError: `name`, `gpu` or a variable is not a value they may take (the message names it).
        """
        where = "devices.simulated_physics"
        if name is None:
            name, where = os.environ.get(PHYSICS_ENV, "").strip() or PhysicsName.REALISTIC, PHYSICS_ENV
        choices = ", ".join(p.value for p in PhysicsName)
        try:
            chosen = PhysicsName(name)
        except ValueError:
            raise UsageError(f"{where} must be one of {choices} (got {name!r})") from None
        if chosen == PhysicsName.IDEAL:
            return cls.ideal()
        return cls.realistic(
            seed if seed is not None else seed_from_env(), gpu_named(gpu), temperature=temperature_from_env()
        )

    @property
    def read_sigma(self) -> float:
        """The log-normal spread of a read's time that puts its 90th percentile where measured."""
        if self.energy_read_median_s <= 0 or self.energy_read_p90_s <= self.energy_read_median_s:
            return 0.0
        return math.log(self.energy_read_p90_s / self.energy_read_median_s) / 1.2815515655446004

    @property
    def preset(self) -> GpuPreset | None:
        """The GPU generation's preset it follows; None for the ideal physics."""
        return PRESETS[self.gpu] if self.gpu is not None else None

    @property
    def clock(self) -> ClockModel | None:
        """The preset's SM clocks and clock curve, which replace the power model's; None: the model's own."""
        return self.preset.clock if self.preset is not None else None

    def parameters(self) -> dict[str, float | int | str | None]:
        """The parameters, for `wattwise devices --json`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}


def gpu_named(gpu: str | None = None) -> SimulatedGpuName:
    """The GPU generation `gpu`; None: `$WATTWISE_SIMULATED_GPU`, else h100.

    Raises:
        UsageError: it is not one of the presets' names (the message names the key or the variable).
    """
    where = "devices.simulated_gpu"
    if gpu is None:
        gpu, where = os.environ.get(GPU_ENV, "").strip() or DEFAULT_GPU.value, GPU_ENV
    try:
        return SimulatedGpuName(gpu)
    except ValueError:
        choices = ", ".join(g.value for g in SimulatedGpuName)
        raise UsageError(f"{where} must be one of {choices} (got {gpu!r})") from None


def temperature_from_env() -> bool:
    """Whether `$WATTWISE_SIMULATED_TEMPERATURE` turns the temperature on (`on`); unset or `off`: no.

    Raises:
        UsageError: it is set to something else.
    """
    value = os.environ.get(TEMPERATURE_ENV, "").strip().lower()
    if value in ("", "off"):
        return False
    if value == "on":
        return True
    raise UsageError(f"{TEMPERATURE_ENV} must be on or off (got {value!r}); unset, it is off")


def seed_from_env() -> int | None:
    """`$WATTWISE_SIMULATED_SEED` as an integer; None when unset or empty.

    Raises:
        UsageError: It is set to something other than an integer.
    """
    value = os.environ.get(SEED_ENV, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(
            f"{SEED_ENV} must be an integer (got {value!r}); unset it for noise that differs per run"
        ) from None
