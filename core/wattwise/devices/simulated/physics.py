"""How a simulated GPU departs from its model, as a real one does: the physics it follows.

`Physics.ideal()` departs in nothing (exact figures, for unit tests); `Physics.realistic()` has a counter
that advances in steps, reads that take time, settings that settle and noise, with parameters from
measured devices. `Physics.named` chooses one from `devices.simulated_physics` or `$WATTWISE_SIMULATED_PHYSICS`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from enum import StrEnum

from wattwise.errors import UsageError


class PhysicsName(StrEnum):
    """Which physics a simulated GPU follows (`devices.simulated_physics`, `WATTWISE_SIMULATED_PHYSICS`)."""

    #: Like a real GPU: a counter that advances in steps, reads that take time, settings that settle, noise.
    REALISTIC = "realistic"
    #: Exact: the counter integrates the model at every read, settings act at once, no noise (unit tests).
    IDEAL = "ideal"


#: Chooses the simulated GPU's physics for every entry point at once (`realistic` or `ideal`).
PHYSICS_ENV = "WATTWISE_SIMULATED_PHYSICS"
#: Fixes the realistic physics' noise (an integer); unset, each run differs, as hardware does.
SEED_ENV = "WATTWISE_SIMULATED_SEED"


@dataclass(frozen=True)
class Physics:
    """How a simulated GPU departs from its power model, as a real one does. Seconds and fractions.

    `ideal()` departs in nothing. `realistic()` takes its parameters from measured devices where there are
    measurements, and says so where a parameter is assumed (see each field and docs/concepts.md).
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
    #: Time constant with which a new power limit or locked clock reaches its effect (0: at once).
    settle_s: float = 0.0
    #: Relative standard deviation of one step's time, drawn per step.
    step_time_noise: float = 0.0
    #: Relative standard deviation of one step's busy power above idle, drawn per step.
    power_noise: float = 0.0
    #: Relative standard deviation of busy power above idle between GPUs (fixed per GPU).
    gpu_spread: float = 0.0
    #: `power_w` averages the power over this window, in seconds (0: the power at that moment).
    power_window_s: float = 0.0
    #: Fixes the noise; None: it differs in every process.
    seed: int | None = None

    @classmethod
    def ideal(cls) -> Physics:
        """Exact figures: the model, integrated at every read; for tests that need them."""
        return cls()

    @classmethod
    def realistic(cls, seed: int | None = None) -> Physics:
        """A physics like an NVIDIA H100's, as measured on 2026-11-25 (docs/acceptance/h100-2026-11-25.md).

        Sources, per parameter:

        - energy counter period: measured, 10.5 changes per second under load (1 / 10.5 = 95 ms);
        - its jitter (+- 10 ms): assumed; the report gives the rate only;
        - energy read: measured, `nvmlDeviceGetTotalEnergyConsumption` 2.81 ms median, 5.74 ms at the 90th
          percentile (500 calls, `benchmarks/nvml_calls.py`);
        - settling of a new limit or clock (time constant 0.1 s): assumed; the report waited 1 s at a new
          limit before measuring 199.1 W under 200 W, which bounds it from above only;
        - step-to-step noise (2% of time, 2% of power) and spread between GPUs (3% of power): assumed, "a few
          per cent"; the report's repeats agree within 0.5 ms per 46-125 ms step over 44-step windows;
        - power reading averaged over 1 s: NVIDIA's NVML reference for `nvmlDeviceGetPowerUsage` (Ampere,
          except GA100, and newer average over a 1 s window).
        """
        return cls(
            name=PhysicsName.REALISTIC,
            energy_update_period_s=1.0 / 10.5,
            energy_update_jitter_s=0.010,
            energy_read_median_s=0.00281,
            energy_read_p90_s=0.00574,
            settle_s=0.1,
            step_time_noise=0.02,
            power_noise=0.02,
            gpu_spread=0.03,
            power_window_s=1.0,
            seed=seed,
        )

    @classmethod
    def named(cls, name: str | PhysicsName | None = None, seed: int | None = None) -> Physics:
        """The physics called `name`; None: `$WATTWISE_SIMULATED_PHYSICS`, else realistic.

        The realistic physics' seed is `seed`, else `$WATTWISE_SIMULATED_SEED`, else none (noise differs).

        Raises:
            UsageError: `name` or a variable is not a value they may take (the message names it).
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
        return cls.realistic(seed if seed is not None else seed_from_env())

    @property
    def read_sigma(self) -> float:
        """The log-normal spread of a read's time that puts its 90th percentile where measured."""
        if self.energy_read_median_s <= 0 or self.energy_read_p90_s <= self.energy_read_median_s:
            return 0.0
        return math.log(self.energy_read_p90_s / self.energy_read_median_s) / 1.2815515655446004

    def parameters(self) -> dict[str, float | int | None]:
        """The parameters, for `wattwise devices --json`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}


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
