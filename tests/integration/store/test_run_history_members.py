"""A team's PostgreSQL store: each run's row names the database user who recorded it; another member can
neither forget nor replace it, the store's admin (a superuser, or the owner of its tables) can; and a reader
with SELECT alone lists the history (the readers open READ ONLY transactions: nothing to write, nothing to
migrate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from tests.support.run_history import make_row
from wattwise.errors import UsageError
from wattwise.store.runs import forget_run, list_history, record_run

MINE, THEIRS = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb"


def as_user(url: str, user: str) -> str:
    return make_url(url).set(username=user).render_as_string(hide_password=False)


def add_role(url: str, name: str, grant: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP ROLE IF EXISTS {name}")
        conn.exec_driver_sql(f"CREATE ROLE {name} LOGIN")
        conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA public TO {name}")
        conn.exec_driver_sql(f"GRANT {grant} ON ALL TABLES IN SCHEMA public TO {name}")
    engine.dispose()


def test_members_keep_their_own_runs_and_the_admin_any(
    fresh_postgres: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    assert record_run(make_row(THEIRS), location=fresh_postgres) is None  # the superuser, postgres
    add_role(fresh_postgres, "alice", "SELECT, INSERT, UPDATE, DELETE")
    alice = as_user(fresh_postgres, "alice")
    assert record_run(make_row(MINE, start_s=1_796_115_600.0), location=alice) is None
    owners = {row.id: row.owner for row in list_history(location=alice).runs}
    assert owners == {MINE: "alice", THEIRS: "postgres"}
    with pytest.raises(UsageError, match=f"run {THEIRS} belongs to postgres"):
        forget_run(THEIRS, location=alice)
    with pytest.raises(UsageError, match=f"run {THEIRS} belongs to postgres"):
        record_run(make_row(THEIRS, energy_j=1.0), location=alice)
    assert forget_run(MINE, location=alice).id == MINE
    record_run(make_row(MINE, start_s=1_796_115_600.0), location=alice)
    assert forget_run(MINE, location=fresh_postgres).id == MINE  # the admin's
    add_role(fresh_postgres, "reader", "SELECT")
    assert [row.id for row in list_history(location=as_user(fresh_postgres, "reader")).runs] == [THEIRS]
