"""A row of the run history that is not a run's (a crash mid-write, an older version, a hand edit) costs that
row alone: `wattwise runs list`, `--json`, `show`, `compare` and `report --job` show every other run and name
the row as unreadable with its id, and `wattwise runs forget ID` removes it.

The readers open the store read-only: they never create, migrate or lock it for writing, never deliver
what waits in the spool, and never write a schema into a file given as `--store`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.support.run_history import T0_S, make_row
from wattwise.cli.main import main
from wattwise.store import spool
from wattwise.store.runs import list_history, record_run

GOOD, BAD, LATER = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb", "20261201T120000Z-cccccc"


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def _set(path: str, run_id: str, column: str, value: object) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE wattwise_run_history SET {column} = ? WHERE id = ?", (value, run_id))


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    """A store of three runs whose middle row's devices column is not JSON."""
    location = str(tmp_path / "jobs.sqlite")
    for run_id, offset in ((GOOD, 0), (BAD, 3600), (LATER, 7200)):
        record_run(make_row(run_id, start_s=T0_S + offset), location=location)
    _set(location, BAD, "devices", "{not json")
    return location


def test_list_shows_every_other_run_and_names_the_unreadable_row(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--store", hostile]) == 0
    out, err = capsys.readouterr()
    assert GOOD in out and LATER in out and BAD not in out
    assert err.strip() == (
        f"wattwise runs: run {BAD} is unreadable (devices is not JSON (Expecting property name enclosed in double "
        f"quotes: line 1 column 2 (char 1))); `wattwise runs forget {BAD}` removes its row"
    )
    assert main(["runs", "list", "--store", hostile, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed["runs"]] == [GOOD, LATER]
    assert [u["id"] for u in listed["unreadable"]] == [BAD] and "devices is not JSON" in listed["unreadable"][0][
        "reason"
    ]


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("devices", "5", "devices must be a list"),
        ("time_s", "fast", "time_s must be"),
        ("start_s", 1e300, "start_time must be"),
        ("simulated", 7, "simulated must be true or false"),
        ("status", "done\x1b[2J", "status must be printable text"),
        ("devices", '["A100\\u001b]8;;http://x\\u0007"]', "devices must be printable text"),
    ],
)
def test_any_column_out_of_its_type_makes_that_row_alone_unreadable(
    hostile: str, column: str, value: object, field: str
) -> None:
    _set(hostile, BAD, "devices", '["NVIDIA A40"]')
    _set(hostile, BAD, column, value)
    listing = list_history(location=hostile)
    assert [r.id for r in listing.runs] == [GOOD, LATER]
    assert [u.id for u in listing.unreadable] == [BAD] and field in listing.unreadable[0].reason


def test_show_and_compare_name_the_unreadable_row_and_show_the_others(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "show", GOOD, "--store", hostile]) == 0
    assert f"run {GOOD}" in capsys.readouterr().out
    assert main(["runs", "show", BAD, "--store", hostile]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run {BAD} is unreadable" in err and f"runs forget {BAD}" in err
    assert main(["runs", "compare", GOOD, LATER, "--store", hostile]) == 0
    assert main(["runs", "compare", GOOD, BAD, "--store", hostile]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_forget_removes_the_unreadable_row(hostile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "forget", BAD, "--store", hostile]) == 0
    assert capsys.readouterr().out.strip() == f"forgot run {BAD}; its folder /runs/{BAD} is left as it is"
    listing = list_history(location=hostile)
    assert [r.id for r in listing.runs] == [GOOD, LATER] and listing.unreadable == []


def test_report_job_sums_every_readable_run_and_names_the_unreadable_one(
    hostile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["report", "--job", "bert/squad", "--store", hostile, "--json"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and f"run {BAD} is unreadable" in err
    assert GOOD in out and LATER in out


def test_a_reader_never_changes_the_store_nor_delivers_the_spool(tmp_path: Path) -> None:
    location = str(tmp_path / "jobs.sqlite")
    record_run(make_row(GOOD), location=location)
    url = f"sqlite:///{location}"
    waiting = spool.spool_run(url, make_row(LATER, start_s=T0_S + 7200))
    before = Path(location).read_bytes()
    with sqlite3.connect(location) as db:  # a writer holds the write lock meanwhile
        db.execute("BEGIN IMMEDIATE")
        listing = list_history(location=location)
        db.rollback()
    assert [r.id for r in listing.runs] == [GOOD, LATER]  # the spooled run is shown, as it waits
    assert spool.pending(url) == [waiting] and Path(location).read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"x"])
def test_a_reader_writes_no_schema_into_a_tiny_file(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "tiny.sqlite"
    store.write_bytes(content)
    assert main(["runs", "list", "--store", str(store)]) == 0
    assert capsys.readouterr().out.strip() == "no runs in the history"
    assert store.read_bytes() == content


def test_a_store_that_needs_upgrading_says_so_and_is_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = tmp_path / "old.sqlite"
    record_run(make_row(GOOD), location=str(location))
    with sqlite3.connect(location) as db:
        db.execute("UPDATE wattwise_alembic_version SET version_num = '0002'")
    before = location.read_bytes()
    assert main(["runs", "list", "--store", str(location)]) == 2
    err = capsys.readouterr().err
    assert "is at revision 0002, older than this wattwise reads" in err and "wattwise jobs list --store" in err
    assert location.read_bytes() == before


def test_a_reader_meeting_a_held_lock_says_so_in_one_line_instead_of_waiting_out_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from wattwise.store import sql

    location = tmp_path / "jobs.sqlite"
    record_run(make_row(GOOD), location=str(location))
    monkeypatch.setattr(sql, "READER_LOCK_TIMEOUT_S", 0.3)  # 10 s in use; a writer's is 120 s
    writer = sqlite3.connect(location, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=DELETE")  # a store not in WAL mode: a writer blocks readers
        writer.execute("BEGIN EXCLUSIVE")
        assert main(["runs", "list", "--store", str(location)]) == 2
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "locked" in err
