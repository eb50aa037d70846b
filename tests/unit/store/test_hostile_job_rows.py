"""A recurring job's row that does not read (batch_sizes not JSON) costs that job alone: `wattwise jobs list`
and the dashboard's jobs page show the others and name it, `jobs show` says so in one line, and `jobs reset`
removes it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from wattwise.cli.main import main
from wattwise.errors import EnergyPluginWarning
from wattwise.recurring.spec import JobSpec
from wattwise.store.factory import open_store


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


@pytest.fixture
def store(tmp_path: Path) -> str:
    location = str(tmp_path / "jobs.sqlite")
    opened = open_store(location)
    try:
        for name in ("bad", "good"):
            spec = JobSpec(
                name, batch_sizes=(32, 64), default_batch_size=32, target_metric=0.9, max_epochs=5, max_power_w=300.0
            )
            opened.register_job(spec, now_s=time.time())
    finally:
        opened.close()
    with sqlite3.connect(location) as db:
        db.execute("UPDATE wattwise_jobs SET batch_sizes = '{not json' WHERE name = 'bad'")
    return location


def test_jobs_list_shows_the_others_and_names_the_unreadable_job(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.warns(EnergyPluginWarning, match=r"job bad: its row in the store is unreadable .*jobs reset bad"):
        assert main(["jobs", "list", "--store", store, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"good"' in out and '"bad"' not in out


def test_jobs_show_is_one_line_and_reset_removes_it(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "show", "bad", "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job bad: its row in the store is unreadable" in err
    assert main(["jobs", "reset", "bad", "--store", store]) == 0
    capsys.readouterr()
    assert main(["jobs", "list", "--store", store, "--json"]) == 0
    assert '"good"' in capsys.readouterr().out


def test_the_dashboards_jobs_page_shows_the_others(store: str) -> None:
    from wattwise.dashboard import pages
    from wattwise.dashboard.history import History

    history = History(store)
    with pytest.warns(EnergyPluginWarning, match="job bad"):
        page = pages.jobs_page(history.jobs(), history.job_names(), store=history.shown)
    assert "good" in page
