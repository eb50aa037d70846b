"""The dashboard's server: whom it serves (its token, a Host of its own), what one request may cost (each run
compared once, at most `MAX_COMPARED`; the runs table a page at a time), one unreadable row costing that row
alone, and the store left exactly as it was (read-only: nothing migrated, locked or delivered)."""

from __future__ import annotations

import asyncio
import functools
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.run_history import T0_S, make_row
from wattwise.dashboard.history import History
from wattwise.dashboard.pages import PAGE_SIZE
from wattwise.dashboard.server import MAX_COMPARED, TOKEN_COOKIE, build_app
from wattwise.store import spool
from wattwise.store.runs import record_run

pytest.importorskip("aiohttp")
TOKEN = "unit-test-token-0123456789"
GOOD, BAD, LATER = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb", "20261201T120000Z-cccccc"


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Three runs, the middle one's devices column not JSON."""
    location = tmp_path / "jobs.sqlite"
    for run_id, offset in ((GOOD, 0), (BAD, 3600), (LATER, 7200)):
        record_run(make_row(run_id, start_s=T0_S + offset), location=str(location))
    with sqlite3.connect(location) as db:
        db.execute("UPDATE wattwise_run_history SET devices = '{not json' WHERE id = ?", (BAD,))
    return location


def fetch(app: Callable[[], Any], path: str, **headers: str) -> tuple[int, str, Any]:
    """GET `path` from a new application `app()` as a client on 127.0.0.1 would: (status, body, response)."""
    from aiohttp.test_utils import TestClient, TestServer

    async def go() -> tuple[int, str, Any]:
        async with TestClient(TestServer(app())) as client:
            response = await client.get(path, headers=headers, allow_redirects=False)
            return response.status, await response.text(), response

    return asyncio.run(go())


def served(store: Path) -> Callable[[], Any]:
    return functools.partial(build_app, History(str(store)), token=TOKEN)


AUTH = {"Authorization": f"Token {TOKEN}"}


def test_a_request_without_the_token_is_refused_and_the_printed_url_sets_a_cookie(store: Path) -> None:
    app = served(store)
    status, body, _ = fetch(app, "/")
    assert status == 403 and "needs its token" in body and GOOD not in body
    assert fetch(app, "/?token=wrong-token-0123456789abc")[0] == 403
    status, body, response = fetch(app, f"/?token={TOKEN}")
    assert status == 200 and GOOD in body
    cookie = response.cookies[TOKEN_COOKIE]
    assert cookie.value == TOKEN and cookie["httponly"] and cookie["samesite"] == "Strict"
    assert fetch(app, "/jobs", Cookie=f"{TOKEN_COOKIE}={TOKEN}")[0] == 200
    assert fetch(app, "/jobs", **AUTH)[0] == 200


@pytest.mark.parametrize(("host", "status"), [("evil.example:8050", 403), ("localhost:8050", 200), ("[::1]:8050", 200)])
def test_a_host_header_of_another_name_is_refused(store: Path, host: str, status: int) -> None:
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refused, token or not."""
    code, body, _ = fetch(served(store), "/", Host=host, **AUTH)
    assert code == status
    if status == 403:
        assert "answers only under its own address" in body and GOOD not in body


def test_a_name_given_with_allow_host_is_served(store: Path) -> None:
    app = functools.partial(build_app, History(str(store)), token=TOKEN, hosts=["dash.example.org"])
    assert fetch(app, "/", Host="dash.example.org:8050", **AUTH)[0] == 200


def test_one_unreadable_row_costs_that_row_alone(store: Path) -> None:
    status, body, _ = fetch(served(store), "/", **AUTH)
    assert status == 200 and f'data-run="{GOOD}"' in body and f'data-run="{LATER}"' in body
    assert f'data-run="{BAD}"' not in body and f"run {BAD} is unreadable" in body and "runs forget" in body
    assert fetch(served(store), "/jobs", **AUTH)[0] == 200


def test_compare_reads_each_run_once_and_at_most_its_bound(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wattwise.dashboard import server

    read: list[str] = []
    monkeypatch.setattr(server, "run_folder", lambda row: read.append(row.id))
    app = served(store)
    status, _, _ = fetch(app, f"/compare?{'&'.join(f'id={GOOD}&id={LATER}' for _ in range(12))}", **AUTH)
    assert status == 200 and read == [GOOD, LATER]
    status, body, _ = fetch(app, f"/compare?id={GOOD}&id={GOOD}&id=20261201T10", **AUTH)
    assert status == 400 and "name one run" in body
    ids = "&".join(f"id=20261201T{h:02d}0000Z-{h:06d}" for h in range(MAX_COMPARED + 1))
    status, body, _ = fetch(app, f"/compare?{ids}", **AUTH)
    assert status == 400 and f"compare at most {MAX_COMPARED} runs at once (got {MAX_COMPARED + 1})" in body


def test_the_runs_table_is_paginated(tmp_path: Path) -> None:
    location = tmp_path / "many.sqlite"
    count = 2 * PAGE_SIZE + 7
    for i in range(count):
        record_run(
            make_row(f"20261201T{i // 3600:02d}{i // 60 % 60:02d}{i % 60:02d}Z-{i:06x}", start_s=T0_S + i),
            location=str(location),
        )
    app = served(location)
    status, first, _ = fetch(app, "/", **AUTH)
    assert status == 200 and first.count('<tr data-run="') == PAGE_SIZE and "page 1 of 3" in first
    status, last, _ = fetch(app, "/?page=3", **AUTH)
    assert status == 200 and last.count('<tr data-run="') == 7 and 'id="page-next"' not in last
    status, body, _ = fetch(app, "/?page=x1", **AUTH)
    assert status == 400 and "page: &#39;x1&#39; is not a page number" in body


def test_the_dashboard_leaves_the_store_and_the_spool_as_they_are(store: Path) -> None:
    url = f"sqlite:///{store}"
    waiting = spool.spool_run(url, make_row("20261201T130000Z-dddddd", start_s=T0_S + 10_800))
    with sqlite3.connect(store) as db:
        db.execute("UPDATE wattwise_alembic_version SET version_num = version_num")  # settle the WAL
    before = store.read_bytes(), sorted(p.name for p in store.parent.iterdir())
    status, body, _ = fetch(served(store), "/", **AUTH)
    assert status == 200 and "20261201T130000Z-dddddd" in body  # shown as it waits, not delivered
    assert fetch(served(store), "/jobs", **AUTH)[0] == 200
    assert (store.read_bytes(), sorted(p.name for p in store.parent.iterdir())) == before
    assert spool.pending(url) == [waiting]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--host", "a" * 70], "--host: 'aaaa"),
        (["--host", "bad host"], "is neither an IP address nor a host name"),
        (["--allow-host", "x" * 64 + ".example"], "--allow-host:"),
        (["--token", "short"], "--token must be at least 22 letters"),
    ],
)
def test_dashboard_refuses_a_bad_host_or_token_in_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from wattwise.cli.main import main

    assert main(["dashboard", "--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_a_run_whose_summary_holds_a_time_no_run_has_is_a_page_naming_the_field(tmp_path: Path) -> None:
    import dataclasses
    import json

    from wattwise.carbon.example import write_example

    run_dir = write_example(tmp_path / "example").run_dir
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["settings_timeline"][0]["timestamp"] = 1e15
    (run_dir / "summary.json").write_text(json.dumps(summary))
    location = tmp_path / "jobs.sqlite"
    record_run(dataclasses.replace(make_row(GOOD), folder=str(run_dir)), location=str(location))
    status, body, _ = fetch(served(location), f"/run?id={GOOD}", **AUTH)
    assert status in (400, 404) and "settings_timeline[0].timestamp must be" in body


@pytest.fixture
def two_projects(tmp_path: Path) -> Path:
    """Two runs of project `alpha`, one of `beta`, one recorded before runs named a project."""
    location = tmp_path / "projects.sqlite"
    for i, project in enumerate(("alpha", "beta", "alpha", None)):
        row = make_row(f"20261201T1{i}0000Z-00000{i}", start_s=T0_S + 3600 * i, project=project)
        record_run(row, location=str(location))
    return location


def listed(body: str) -> list[str]:
    return re.findall(r'<tr data-run="([^"]+)"', body)


def test_the_runs_table_opens_on_the_dashboards_own_project_and_links_to_every_projects(
    two_projects: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import html

    from wattwise.dashboard import pages

    app = functools.partial(build_app, History(str(two_projects)), token=TOKEN, project="alpha")
    status, body, _ = fetch(app, "/", **AUTH)
    assert status == 200 and listed(body) == ["20261201T120000Z-000002", "20261201T100000Z-000000"]
    assert "Runs of project <strong>alpha</strong> (the folder the dashboard was started in)" in body
    assert 'href="/?project=&amp;sort=start_time&amp;order=desc" id="every-project"' in body
    assert '<option value="beta">beta</option>' in body and '<option value="alpha" selected>alpha</option>' in body
    status, body, _ = fetch(app, "/?project=", **AUTH)
    assert status == 200 and len(listed(body)) == 4 and "Runs of every project." in body
    assert 'href="/?sort=start_time&amp;order=desc" id="own-project"' in body
    status, body, _ = fetch(app, "/?project=beta", **AUTH)
    assert listed(body) == ["20261201T110000Z-000001"] and 'id="own-project">project alpha\'s</a>' in body
    # Paging through every project's runs keeps showing every project's.
    monkeypatch.setattr(pages, "PAGE_SIZE", 3)
    body = fetch(app, "/?project=", **AUTH)[1]
    (next_page,) = re.findall(r'<a href="([^"]+)" id="page-next"', body)
    assert html.unescape(next_page) == "/?project=&sort=start_time&order=desc&page=2"
    assert listed(fetch(app, html.unescape(next_page), **AUTH)[1]) == ["20261201T100000Z-000000"]


def test_a_dashboard_whose_project_has_no_runs_shows_every_projects(two_projects: Path) -> None:
    app = functools.partial(build_app, History(str(two_projects)), token=TOKEN, project="gamma")
    status, body, _ = fetch(app, "/", **AUTH)
    assert status == 200 and len(listed(body)) == 4 and "Runs of every project." in body


def test_wattwise_dashboard_started_in_a_projects_folder_serves_that_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattwise.cli.main import main
    from wattwise.dashboard import server

    made: dict[str, Any] = {}

    async def no_serving(app: Any, host: str, port: int, started: Callable[[str], None]) -> None:
        started(f"http://{host}:{port}/")

    monkeypatch.setattr(server, "build_app", lambda *a, **kw: made.update(kw))
    monkeypatch.setattr(server, "serve", no_serving)
    (tmp_path / "my-model" / ".git").mkdir(parents=True)
    (tmp_path / "my-model" / "src").mkdir()
    monkeypatch.chdir(tmp_path / "my-model" / "src")
    assert main(["dashboard", "--port", "0", "--store", str(tmp_path / "jobs.sqlite")]) == 0
    assert made["project"] == "my-model"
    assert main(["dashboard", "--port", "0", "--store", str(tmp_path / "jobs.sqlite"), "--project", "other"]) == 0
    assert made["project"] == "other"
