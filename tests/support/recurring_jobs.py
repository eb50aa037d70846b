"""The recurring-job tests of both adapters (Lightning's callback, Accelerate's decorator): the simulated GPU
they train on, what the store kept of a job, and the power limit the tuning is expected to choose.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.power_limit import ProfileEntry, profile_limits_w, select_power_limit
from wattwise.recurring import RunRecord, open_store

#: The simulated GPU's step time at its highest limit, in s.
BASE_S = 0.01
#: The tuning's step between profiled limits, in W (power_limit.step_w in the tests' overrides).
STEP_W = 50.0
#: The recurring job's epoch budget (max_epochs).
MAX_EPOCHS = 6


class Stored(NamedTuple):
    """What the store keeps of a recurring job."""

    runs: list[RunRecord]
    power_limits: dict[int, float]


def recurring_job_gpu(clock: Any) -> SimulatedGPU:
    """Simulated GPU 0 with the default power model, timed by `clock` (a virtual clock: exact figures)."""
    return SimulatedGPU(0, PowerModel.default(), base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep)


def stored(job: str) -> Stored:
    """The job's runs and remembered power limits in the default store (the test's own WATTWISE_HOME)."""
    store = open_store()
    try:
        return Stored(store.runs(job), store.power_limits(job))
    finally:
        store.close()


def tuned_choice() -> float:
    """The limit the tuning picks on the default power model (selector cost, eta 0.5), computed directly."""
    model = PowerModel.default()
    lo, hi = model.limit_range_w
    entries = []
    for w in profile_limits_w(lo, hi, STEP_W):
        t, p = model.at_limit(w)
        entries.append(ProfileEntry(w, t * BASE_S, p * t * BASE_S))
    return select_power_limit(entries, "cost", eta=0.5, max_power_w=hi).power_limit_w
