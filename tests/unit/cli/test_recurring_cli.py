"""`wattwise jobs list|show|reset` on a real store: what a user sees, and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from wattwise.cli.main import main
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.store import STORE_ENV, store_url
from wattwise.store.sql import SqlJobStore

SPEC = JobSpec(
    name="bert/squad",
    batch_sizes=(16, 32),
    default_batch_size=32,
    target_metric=84.0,
    max_epochs=6,
    max_power_w=250.0,
)


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite"
    store = SqlJobStore(store_url(str(path)))
    opt = BatchSizeOptimizer(SPEC, store, rng=np.random.default_rng(0))
    for epochs_to_target in (4, 3, 3):
        rec = opt.next_batch_size()
        if rec.power_limit_w is None:
            opt.remember_power_limit(rec.batch_size, 200.0)
        for epoch in range(1, 7):
            reached = epoch >= epochs_to_target
            if opt.should_stop(rec.run_id, epoch, 1e5 * epoch, 500.0 * epoch, 85.0 if reached else 80.0):
                break
        opt.report_result(rec.run_id, energy_j=1e5 * epoch, time_s=500.0 * epoch, reached=reached)
    opt.next_batch_size()  # left open
    store.close()
    return path


def test_list_shows_each_job_with_counts(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list", "--store", str(store_path), "--json"]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    assert [(j["name"], j["runs"], j["reached"], j["open"]) for j in jobs] == [("bert/squad", 4, 3, 1)]
    assert main(["jobs", "list", "--store", str(store_path)]) == 0
    assert "bert/squad" in capsys.readouterr().out


def test_show_gives_settings_power_limits_and_every_run(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "show", "bert/squad", "--store", str(store_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["job"]["batch_sizes"] == [16, 32] and shown["job"]["default_batch_size"] == 32
    assert [r["state"] for r in shown["runs"]] == ["reached", "reached", "reached", "open"]
    assert {b["batch_size"]: b["power_limit_w"] for b in shown["summary"]["batch_sizes"]} == {16: 200.0, 32: 200.0}
    # 32 reached in 4 epochs, 16 in 3 at the same cost per epoch: 16 is the best so far.
    assert shown["summary"]["best_batch_size"] == 16
    assert main(["jobs", "show", "bert/squad", "--store", str(store_path)]) == 0
    assert "best batch size so far 16" in capsys.readouterr().out


def test_reset_forgets_the_job(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "reset", "bert/squad", "--store", str(store_path)]) == 0
    assert "4 runs" in capsys.readouterr().out
    assert main(["jobs", "list", "--store", str(store_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"] == []


def test_unknown_job_exits_2_with_one_line(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("show", "reset"):
        assert main(["jobs", action, "nope", "--store", str(store_path)]) == 2
        err = capsys.readouterr().err
        assert "no job named 'nope'" in err and len(err.strip().splitlines()) == 1


def test_store_comes_from_the_environment_and_listing_creates_nothing(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STORE_ENV, str(store_path))
    assert main(["jobs", "list", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["jobs"]) == 1
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    assert main(["jobs", "list"]) == 0
    assert "no recurring jobs" in capsys.readouterr().out
    assert not (tmp_path / "home").exists()


def test_missing_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["jobs"])
    assert exit_info.value.code == 2
