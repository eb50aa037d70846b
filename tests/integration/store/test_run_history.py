"""The run history on PostgreSQL: runs recorded, listed by job, start and status, found by id prefix and
forgotten, as on SQLite (tests/unit/store/test_run_history.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.postgres_server import empty_database
from tests.support.run_history import check_the_history_records_lists_and_forgets_runs
from wattwise.store import store_url


def test_postgresql_history_records_lists_and_forgets_runs(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    empty_database(store_url(postgres_url))
    check_the_history_records_lists_and_forgets_runs(postgres_url)
