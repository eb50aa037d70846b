"""The job store on SQLite and on a real PostgreSQL server: concurrent writers lose nothing, WAL, bad URLs.

What every store answers alike (in memory too): test_store_contract.py. Its schema migrations:
test_store_migrations.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.errors import Unavailable, UsageError
from wattwise.store import store_url
from wattwise.store.sql import SqlJobStore


def test_sqlite_store_uses_wal(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    with store.connection() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    store.close()


def test_bad_store_urls_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no driver"):
        SqlJobStore("nosuchdb://x/y")
    with pytest.raises(Unavailable, match="cannot open the job store"):  # no server there: unavailable
        SqlJobStore(f"postgresql+psycopg://nobody@/db?host={tmp_path}&port=1", reconnect_s=0.0)
    assert store_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url(str(tmp_path / "x.sqlite")) == f"sqlite:///{tmp_path / 'x.sqlite'}"
