"""The carbon part of a run: after tuning, follow the grid's carbon intensity between two limits.

It loads the intensity source of `carbon.*` once and asks `CarbonAwarePowerLimit` (pure) which of the
profile's time- and energy-optimal limits the grid calls for now. Every process decides from rank 0's
clock, so all of them apply the same limit at the same step. It holds no state worth a checkpoint: after
a resume it re-reads the intensity at its first check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from wattwise.carbon.policy import CarbonAwarePowerLimit
from wattwise.carbon.series import INTENSITY, Constant, Series, load_series_csv, parse_series
from wattwise.config import CarbonConfig
from wattwise.distributed import Collective
from wattwise.profile import ProfileEntry


class CarbonControl:
    """Carbon-aware choice between the profile's limits. Made only when `carbon.aware` is set."""

    def __init__(self, cfg: CarbonConfig, *, wall_clock: Callable[[], float]) -> None:
        self.cfg = cfg
        self._wall = wall_clock
        self.intensity: Series
        if cfg.intensity is not None:  # a number, a CSV file or a code of the bundled table, as --intensity
            self.intensity = parse_series(cfg.intensity, INTENSITY.setting("carbon.intensity"))
        elif cfg.intensity_g_per_kwh is not None:
            self.intensity = Constant(float(cfg.intensity_g_per_kwh), "carbon.intensity_g_per_kwh")
        else:
            self.intensity = load_series_csv(Path(str(cfg.intensity_csv)), INTENSITY)
        self.policy: CarbonAwarePowerLimit | None = None

    def target_w(self, profile: Sequence[ProfileEntry], collective: Collective) -> float | None:
        """The limit to switch to now, or None to keep the current one."""
        if self.policy is None:
            self.policy = CarbonAwarePowerLimit(
                list(profile), threshold_g_per_kwh=self.cfg.threshold_g_per_kwh, interval_s=self.cfg.interval_s
            )
        change = self.policy.check(collective.broadcast(self._wall()), self.intensity)
        return change.power_limit_w if change is not None else None
