"""The run history on SQLite: runs recorded, listed by job, start and status, found by id prefix and forgotten;
a run whose store is unreachable is spooled and delivered at the next opening; a spooled row that is not a
run's is set aside. (The same checks run on PostgreSQL in the integration tier.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.support.run_history import check_the_history_records_lists_and_forgets_runs, make_row
from wattwise.errors import EnergyPluginWarning, UsageError
from wattwise.store import spool
from wattwise.store import sql as sql_store
from wattwise.store.factory import open_store
from wattwise.store.runs import check_run_id, list_runs, new_run_id, record_run


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def test_sqlite_history_records_lists_and_forgets_runs(sqlite_url: str) -> None:
    check_the_history_records_lists_and_forgets_runs(sqlite_url)


def test_listing_a_store_that_does_not_exist_creates_nothing(tmp_path: Path) -> None:
    assert list_runs(location=str(tmp_path / "none.sqlite")) == []
    assert not (tmp_path / "none.sqlite").exists()


def test_a_run_whose_store_is_unreachable_is_spooled_then_delivered(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = make_row("20261201T100000Z-aaaaaa")
    real = sql_store.SqlJobStore

    def unreachable(url: str, **_options: object) -> sql_store.SqlJobStore:
        raise spool.StoreUnavailable("cannot reach the job store", url=url, reason="connection refused")

    monkeypatch.setattr(sql_store, "SqlJobStore", unreachable)
    kept = record_run(row, location=sqlite_url)
    assert kept is not None and kept.exists() and spool.pending(sqlite_url) == [kept]
    monkeypatch.setattr(sql_store, "SqlJobStore", real)
    (waiting,) = list_runs(location=sqlite_url)  # a reader shows the spooled run, and delivers nothing
    assert waiting.owner and waiting == dataclasses.replace(row, owner=waiting.owner)
    assert spool.pending(sqlite_url) == [kept]
    open_store(sqlite_url).close()  # a writer's opening delivers it
    assert spool.pending(sqlite_url) == []
    assert list_runs(location=sqlite_url) == [waiting]  # the same owner once in the store


def test_a_spooled_run_with_a_field_no_run_has_is_set_aside_naming_it(sqlite_url: str) -> None:
    real_row = make_row("20261201T100000Z-aaaaaa")
    path = spool.spool_run(sqlite_url, real_row)
    data = json.loads(path.read_text())
    data["energy_j"] = -5.0
    path.write_text(json.dumps(data))
    assert list_runs(location=sqlite_url) == []  # a reader leaves the file to the store's next writer
    assert spool.pending(sqlite_url) == [path]
    with pytest.warns(EnergyPluginWarning, match="energy_j must be"):
        open_store(sqlite_url).close()
    assert [p.name for p in spool.rejected(sqlite_url)] == [path.name + ".rejected"]


def test_a_row_outside_its_bounds_is_refused_naming_the_field(sqlite_url: str) -> None:
    with pytest.raises(UsageError, match="run: mode must be one of measure, tune, cap"):
        record_run(make_row("20261201T100000Z-aaaaaa", mode="fast"), location=sqlite_url)
    with pytest.raises(UsageError, match="run: power_limit_w must be"):
        record_run(make_row("20261201T100000Z-aaaaaa", power_limit_w=0.0), location=sqlite_url)


def test_new_run_ids_sort_by_start_and_are_run_ids() -> None:
    early, late = new_run_id(1_796_119_200.0), new_run_id(1_796_119_201.0)
    assert early.startswith("20261201T100000Z-") and early < late
    assert check_run_id(early) == early
    with pytest.raises(UsageError, match=r"ID: '\.\./x' is not a run id"):
        check_run_id("../x")
