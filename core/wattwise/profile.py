"""`ProfileEntry`: what one power limit cost, the datum power-limit tuning decides on and the record keeps.

Its own module, so that the decisions (`wattwise.power_limit`, `wattwise.carbon.policy`) and the record
(`wattwise.record.summary`) share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileEntry:
    """What one power limit cost: time and energy (all GPUs of this job) of one training step."""

    power_limit_w: float
    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        """Average power over the step, in watts (0 for a step of no time)."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0
