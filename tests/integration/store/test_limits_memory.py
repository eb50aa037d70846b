"""Remembered power limits live in the store: what a tuning run saves, the next run gets back with who
chose it and how; wattwise 0.1.0's JSON file is imported once, losing nothing.

`tests/data/power_limits_v1.json` was written by 0.1.0's own `LimitsMemory.save`.
"""

from __future__ import annotations

from tests.support.postgres_server import empty_database
from tests.support.store_checks import check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run
from wattwise.store import store_url


def test_postgresql_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(postgres_url: str) -> None:
    empty_database(store_url(postgres_url))
    check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(postgres_url)
