"""A simulated GPU on a virtual clock, as the adapters' tests train on it, and the power limit its tuning
is expected to choose, computed straight from the power model (independently of the code under test).
"""

from __future__ import annotations

from typing import Any

from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.power_limit import profile_limits_w, select_power_limit
from wattwise.profile import ProfileEntry

#: The simulated GPU's step time at its highest limit, in s.
BASE_S = 0.01
#: The tuning's step between profiled limits, in W (power_limit.step_w in the tests' overrides).
STEP_W = 50.0


def clocked_gpu(clock: Any, cls: type[SimulatedGPU] = SimulatedGPU) -> SimulatedGPU:
    """Simulated GPU 0 (of class `cls`) with the default power model, timed by `clock`: exact figures."""
    return cls(0, PowerModel.default(), base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep)


def tuned_choice(selector: str = "cost", eta: float = 0.5) -> float:
    """The limit the tuning picks on the default power model with `selector` and `eta`, in W."""
    model = PowerModel.default()
    lo, hi = model.limit_range_w
    entries = []
    for w in profile_limits_w(lo, hi, STEP_W):
        t, p = model.at_limit(w)
        entries.append(ProfileEntry(w, t * BASE_S, p * t * BASE_S))
    return select_power_limit(entries, selector, eta=eta, max_power_w=hi).power_limit_w
