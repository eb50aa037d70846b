"""The store's schema by Alembic on a real PostgreSQL server: an empty database and a store made by wattwise
0.1.0 both reach the newest revision without losing a row. The checks are in tests/support/store_checks.py;
the unit tier runs them on SQLite. (Concurrent first opens: the 8-process tests of test_recurring_store.py.)
"""

from __future__ import annotations

from tests.support.store_checks import (
    check_a_v1_store_is_upgraded_without_losing_a_row,
    check_migrations_build_the_current_schema,
)


def test_postgresql_migrations_build_the_current_schema(fresh_postgres: str) -> None:
    check_migrations_build_the_current_schema(fresh_postgres)


def test_postgresql_store_of_wattwise_0_1_is_upgraded_without_losing_a_row(fresh_postgres: str) -> None:
    check_a_v1_store_is_upgraded_without_losing_a_row(fresh_postgres)
