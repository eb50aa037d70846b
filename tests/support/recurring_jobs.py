"""The recurring-job tests of both adapters (Lightning's callback, Accelerate's decorator): the job's epoch
budget and what the store kept of it. Their GPU and expected tuned limit: tests/support/tuned_gpu.py.
"""

from __future__ import annotations

from typing import NamedTuple

from wattwise.recurring import StoredRun
from wattwise.store import open_store

#: The recurring job's epoch budget (max_epochs).
MAX_EPOCHS = 6


class Stored(NamedTuple):
    """What the store keeps of a recurring job."""

    runs: list[StoredRun]
    power_limits: dict[int, float]


def stored(job: str) -> Stored:
    """The job's runs and remembered power limits in the default store (the test's own WATTWISE_HOME)."""
    store = open_store()
    try:
        return Stored(store.runs(job), store.power_limits(job))
    finally:
        store.close()
