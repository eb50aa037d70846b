"""Carbon-aware power limit: go fast when the grid is clean, save energy when it is dirty (pure).

Following Chase (Zeus's companion work), both limits come from the one power-limit profile the
callback already measured, so switching needs no re-profiling: the time-optimal limit while the
grid's carbon intensity is below a threshold, the energy-optimal one at or above it. A hysteresis band
(optional) keeps the limit from flapping when the intensity hovers around the threshold: once in
energy mode, the intensity must drop below `threshold - hysteresis` to go back.

`CarbonAwarePowerLimit.check(now_s, intensity)` is meant to be called at every step boundary with the
current time; it re-reads the intensity only once `interval_s` has passed since the last check and
returns a `LimitChange` only when the limit must change. It never reads the clock or touches a device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from wattwise.carbon.series import Series
from wattwise.errors import UsageError
from wattwise.power_limit import select_power_limit
from wattwise.profile import ProfileEntry
from wattwise.vocabulary import CarbonMode, Selector

#: A re-check is due when this close to the interval (float sums of intervals must not skip a check).
_DUE_TOLERANCE_S = 1e-6


@dataclass(frozen=True)
class LimitChange:
    """Set the power limit to `power_limit_w` at `at_s` because the intensity put us in `mode`.

    `intensity_g_per_kwh` is None when the series had no value then (energy mode, the safe default).
    """

    at_s: float
    power_limit_w: float
    mode: CarbonMode
    intensity_g_per_kwh: float | None


class CarbonAwarePowerLimit:
    """Chooses between the time-optimal and the energy-optimal limit of one profile by grid intensity."""

    def __init__(
        self,
        profile: Sequence[ProfileEntry],
        *,
        threshold_g_per_kwh: float,
        interval_s: float,
        hysteresis_g_per_kwh: float = 0.0,
    ) -> None:
        if not profile:
            raise UsageError("profile: the carbon-aware power limit needs a non-empty power-limit profile")
        if not threshold_g_per_kwh >= 0 or not math.isfinite(threshold_g_per_kwh):
            raise UsageError(
                f"threshold_g_per_kwh: the carbon threshold must be a gCO2e/kWh value >= 0, e.g. 300 "
                f"(got {threshold_g_per_kwh})"
            )
        if not interval_s > 0 or not math.isfinite(interval_s):
            raise UsageError(f"interval_s: the re-check interval must be > 0 seconds, e.g. 900 (got {interval_s})")
        if not 0 <= hysteresis_g_per_kwh <= threshold_g_per_kwh:
            raise UsageError(
                f"hysteresis_g_per_kwh: the hysteresis must be between 0 and the threshold "
                f"{threshold_g_per_kwh:g} gCO2e/kWh (got {hysteresis_g_per_kwh})"
            )
        self.time_optimal = select_power_limit(profile, Selector.TIME)
        self.energy_optimal = select_power_limit(profile, Selector.ENERGY)
        self.threshold_g_per_kwh = threshold_g_per_kwh
        self.interval_s = interval_s
        self.hysteresis_g_per_kwh = hysteresis_g_per_kwh
        self.mode: CarbonMode | None = None
        self.last_check_s: float | None = None

    def mode_for(self, intensity_g_per_kwh: float | None) -> CarbonMode:
        """The mode for this intensity, given the current mode (for hysteresis); unknown means energy."""
        if intensity_g_per_kwh is None:
            return self.mode or CarbonMode.ENERGY
        if self.mode == CarbonMode.ENERGY:
            back_below = self.threshold_g_per_kwh - self.hysteresis_g_per_kwh
            return CarbonMode.TIME if intensity_g_per_kwh < back_below else CarbonMode.ENERGY
        return CarbonMode.TIME if intensity_g_per_kwh < self.threshold_g_per_kwh else CarbonMode.ENERGY

    def limit_of(self, mode: CarbonMode) -> ProfileEntry:
        """The profile entry of the time-optimal or the energy-optimal limit."""
        return self.time_optimal if mode == CarbonMode.TIME else self.energy_optimal

    def check(self, now_s: float, intensity: Series) -> LimitChange | None:
        """At a step boundary: the change to apply now, or None (not yet due, or the limit stays).

        The first call always returns the initial limit. Outside the series' coverage the current mode
        is kept (energy mode if there is none yet).
        """
        if self.last_check_s is not None and now_s - self.last_check_s < self.interval_s - _DUE_TOLERANCE_S:
            return None
        self.last_check_s = now_s
        value = intensity.value_at(now_s) if intensity.start_s <= now_s < intensity.end_s else None
        previous = self.mode
        self.mode = self.mode_for(value)
        if previous is not None and self.limit_of(previous) == self.limit_of(self.mode):
            return None
        return LimitChange(now_s, self.limit_of(self.mode).power_limit_w, self.mode, value)


def limit_schedule(
    profile: Sequence[ProfileEntry],
    intensity: Series,
    start_s: float,
    end_s: float,
    *,
    threshold_g_per_kwh: float,
    interval_s: float,
    hysteresis_g_per_kwh: float = 0.0,
) -> list[LimitChange]:
    """When the limit changes over [start_s, end_s) if checked every `interval_s` from `start_s`."""
    policy = CarbonAwarePowerLimit(
        profile,
        threshold_g_per_kwh=threshold_g_per_kwh,
        interval_s=interval_s,
        hysteresis_g_per_kwh=hysteresis_g_per_kwh,
    )
    changes = []
    checks = max(0, math.ceil((end_s - start_s) / interval_s))
    for k in range(checks):
        change = policy.check(start_s + k * interval_s, intensity)
        if change is not None:
            changes.append(change)
    return changes
