"""In a shared store each row of the run history carries its owner, and only the owner (or the store's admin:
who owns its file, or root; on PostgreSQL who owns its table, or a superuser) forgets or replaces it. A store
at revision 0003, before rows had owners, is read as it is."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from tests.support.run_history import make_row
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.store import history
from wattwise.store.factory import open_store
from wattwise.store.runs import forget_run, list_history, record_run

RUN = "20261201T100000Z-aaaaaa"


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


@pytest.fixture
def theirs(tmp_path: Path) -> str:
    """A store whose one run another member recorded."""
    location = str(tmp_path / "shared.sqlite")
    record_run(make_row(RUN), location=location)
    with sqlite3.connect(location) as db:
        db.execute("UPDATE wattwise_run_history SET owner = 'alice'")
    return location


def test_a_row_carries_who_recorded_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    location = str(tmp_path / "jobs.sqlite")
    record_run(make_row(RUN), location=location)
    (row,) = list_history(location=location).runs
    store = open_store(location)
    try:
        assert row.owner == store.read(history.current_owner)
    finally:
        store.close()
    assert main(["runs", "list", "--store", location, "--json"]) == 0
    assert f'"owner": "{row.owner}"' in capsys.readouterr().out


def test_another_members_run_is_neither_forgotten_nor_replaced(
    theirs: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(history, "is_store_admin", lambda conn: False)
    assert main(["runs", "forget", RUN, "--store", theirs]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run {RUN} belongs to alice: only they, or the store's admin" in err
    with pytest.raises(UsageError, match="belongs to alice"):
        record_run(make_row(RUN, energy_j=1.0), location=theirs)
    (row,) = list_history(location=theirs).runs
    assert (row.owner, row.energy_j) == ("alice", 30_000.0)


def test_the_stores_admin_may_forget_any_run(theirs: str) -> None:
    assert forget_run(RUN, location=theirs).id == RUN  # root here, and the file's owner
    assert list_history(location=theirs).runs == []


def test_the_admin_of_a_sqlite_store_is_who_owns_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("gives the store's file to another uid: needs root")
    location = tmp_path / "jobs.sqlite"
    record_run(make_row(RUN), location=str(location))
    os.chown(location, 4321, -1)
    store = open_store(str(location))
    try:
        monkeypatch.setattr(os, "geteuid", lambda: 4321)
        assert store.read(history.is_store_admin) is True
        monkeypatch.setattr(os, "geteuid", lambda: 4322)
        assert store.read(history.is_store_admin) is False
    finally:
        store.close()


def test_a_store_at_revision_0003_is_read_with_no_owners(tmp_path: Path) -> None:
    location = tmp_path / "old.sqlite"
    record_run(make_row(RUN), location=str(location))
    with sqlite3.connect(location) as db:
        db.execute("ALTER TABLE wattwise_run_history DROP COLUMN owner")
        db.execute("UPDATE wattwise_alembic_version SET version_num = '0003'")
    before = location.read_bytes()
    (row,) = list_history(location=str(location)).runs
    assert row.id == RUN and row.owner is None and location.read_bytes() == before
