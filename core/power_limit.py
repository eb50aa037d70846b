"""Power-limit choice: the cost arithmetic and the selectors (pure).

Zeus (NSDI'23) trades energy against time with one knob, eta in [0, 1]:

    cost = eta * E + (1 - eta) * MaxPower * T

where MaxPower is the maximum power limit times the number of GPUs, so both terms are joules.
eta = 1 minimises energy alone; eta = 0 minimises time alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.errors import UsageError

Selector = Literal["energy", "time", "cost", "slowdown"]
SELECTORS: tuple[str, ...] = ("energy", "time", "cost", "slowdown")


@dataclass(frozen=True)
class ProfileEntry:
    """What one power limit cost: time and energy (all GPUs of this job) of one training step."""

    power_limit_w: float
    time_s: float
    energy_j: float

    @property
    def avg_power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0


def zeus_cost(energy_j: float, time_s: float, *, eta: float, max_power_w: float) -> float:
    """`eta * energy_j + (1 - eta) * max_power_w * time_s`, in joules."""
    check_eta(eta)
    return eta * energy_j + (1.0 - eta) * max_power_w * time_s


def check_eta(eta: float) -> None:
    if not (0.0 <= eta <= 1.0) or math.isnan(eta):
        raise UsageError(f"eta must be between 0 and 1 (got {eta}); 1 minimises energy, 0 minimises time")


def select_power_limit(
    profile: Sequence[ProfileEntry],
    selector: str,
    *,
    eta: float = 0.5,
    max_power_w: float | None = None,
    max_slowdown: float = 0.1,
) -> ProfileEntry:
    """Pick the entry of `profile` that the selector prefers.

    - "energy": least energy per step.
    - "time": least time per step.
    - "cost": least Zeus cost; `max_power_w` defaults to the highest profiled limit (one GPU).
    - "slowdown": least energy among the limits whose step time is at most `(1 + max_slowdown)` times the
      step time at the highest profiled limit (the time the job takes without wattwise).

    Ties go to the higher power limit (the faster, safer choice).
    """
    if not profile:
        raise ValueError("cannot select a power limit from an empty profile")
    if selector not in SELECTORS:
        raise UsageError(f"selector must be one of {', '.join(SELECTORS)} (got {selector!r})")
    # Highest limit first, so that min() keeps the higher limit on ties.
    ordered = sorted(profile, key=lambda e: -e.power_limit_w)
    if selector == "energy":
        return min(ordered, key=lambda e: e.energy_j)
    if selector == "time":
        return min(ordered, key=lambda e: e.time_s)
    if selector == "cost":
        check_eta(eta)
        pmax = max_power_w if max_power_w is not None else ordered[0].power_limit_w
        return min(ordered, key=lambda e: zeus_cost(e.energy_j, e.time_s, eta=eta, max_power_w=pmax))
    if max_slowdown < 0 or math.isnan(max_slowdown):
        raise UsageError(f"max_slowdown must be >= 0, a fraction such as 0.1 for 10% (got {max_slowdown})")
    limit_s = ordered[0].time_s * (1.0 + max_slowdown)
    allowed = [e for e in ordered if e.time_s <= limit_s]
    return min(allowed, key=lambda e: e.energy_j)
