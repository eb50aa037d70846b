"""Remembered power limits live in the store: what a tuning run saves, the next run gets back with who
chose it and how; wattwise 0.1.0's JSON file is imported once, losing nothing.

`tests/data/power_limits_v1.json` was written by 0.1.0's own `LimitsMemory.save`.
"""

from __future__ import annotations

from tests.support.postgres_server import empty_database
from wattwise.power_limit import ProfileEntry
from wattwise.store import store_url
from wattwise.store.limits_memory import LimitsMemory, RememberedLimit, memory_key

PROFILE = [ProfileEntry(300.0, 0.5, 150.0), ProfileEntry(250.0, 0.52, 130.0), ProfileEntry(200.0, 0.6, 120.0)]
KEY = memory_key("bert/squad", "NVIDIA A40", 4, 32)


def _check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(location: str) -> None:
    memory = LimitsMemory(location)
    assert memory.load(KEY) is None and memory.recall(KEY) is None
    memory.save(KEY, PROFILE[1], PROFILE, selector="cost", eta=0.5, run_id="run-7", chosen_at_s=1000.0)
    assert memory.load(KEY) == (PROFILE[1], PROFILE)
    assert LimitsMemory(location).recall(KEY) == RememberedLimit(PROFILE[1], PROFILE, "cost", 0.5, 1000.0, "run-7")
    # A later tuning of the same key replaces it; other keys are apart.
    memory.save(KEY, PROFILE[2], PROFILE[1:], selector="energy", eta=1.0, chosen_at_s=2000.0)
    memory.save(memory_key("bert/squad", "NVIDIA A40", 4, 64), PROFILE[0], PROFILE)
    assert memory.recall(KEY) == RememberedLimit(PROFILE[2], PROFILE[1:], "energy", 1.0, 2000.0, None)
    assert memory.forget(KEY) is True and memory.forget(KEY) is False
    assert memory.load(KEY) is None
    assert memory.load(memory_key("bert/squad", "NVIDIA A40", 4, 64)) == (PROFILE[0], PROFILE)


def test_postgresql_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(postgres_url: str) -> None:
    empty_database(store_url(postgres_url))
    _check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(postgres_url)


