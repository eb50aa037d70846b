"""The store's schema by Alembic on SQLite: an empty database and a store made by wattwise 0.1.0 both reach
the newest revision without losing a row (the same checks run on PostgreSQL in the integration tier: see
tests/support/store_checks.py), the baseline can be restored, and a store from a newer wattwise is refused.

The 0.1.0 stores are `tests/data/store_v1.*.sql`, dumps of stores that 0.1.0's own code filled.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, inspect

from tests.support.store_checks import (
    check_a_v1_store_is_upgraded_without_losing_a_row,
    check_migrations_build_the_current_schema,
    load_v1_store,
    rows_v1,
)
from wattwise.errors import UsageError
from wattwise.store.migrations import (
    BASELINE_REVISION,
    HEAD_REVISION,
    VERSION_TABLE,
    alembic_config,
    current_revision,
    head_revision,
)
from wattwise.store.sql import SqlJobStore


def test_sqlite_migrations_build_the_current_schema(sqlite_url: str) -> None:
    check_migrations_build_the_current_schema(sqlite_url)


def test_sqlite_store_of_wattwise_0_1_is_upgraded_without_losing_a_row(sqlite_url: str) -> None:
    check_a_v1_store_is_upgraded_without_losing_a_row(sqlite_url)


def test_downgrade_to_the_baseline_gives_back_a_store_wattwise_0_1_opens(sqlite_url: str) -> None:
    load_v1_store(sqlite_url)
    before = rows_v1(sqlite_url)
    SqlJobStore(sqlite_url).close()
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), BASELINE_REVISION)
        assert not inspect(conn).has_table("wattwise_remembered_limits")
    engine.dispose()
    assert rows_v1(sqlite_url) == before


def test_store_written_by_a_newer_wattwise_is_refused(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    with store._writer.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    store.close()
    with pytest.raises(UsageError, match="newer than this wattwise"):
        SqlJobStore(sqlite_url)


def test_store_of_an_unknown_pre_alembic_version_is_refused(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    Path(path).parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE wattwise_schema_version (version INTEGER NOT NULL); "
            "INSERT INTO wattwise_schema_version VALUES (2);"
        )
    conn.close()
    with pytest.raises(UsageError, match="schema version 2, newer than this wattwise"):
        SqlJobStore(sqlite_url)


def test_the_head_revision_named_in_code_is_alembics_head() -> None:
    assert head_revision() == HEAD_REVISION


def test_a_store_at_the_newest_revision_opens_without_alembic(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    SqlJobStore(sqlite_url).close()  # created and upgraded: Alembic runs
    monkeypatch.setitem(sys.modules, "alembic", None)  # importing it now raises ImportError
    store = SqlJobStore(sqlite_url)
    with store._writer.begin() as conn:
        assert current_revision(conn) == HEAD_REVISION
    store.close()
