"""Tuning that spans runs: a run too short to profile every limit keeps what it profiled (per job, GPU model
and count, batch size, in the store) as an unfinished profile, the job's next run goes on from there, and a
limit is remembered as chosen only from a finished profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tuning_runs import SMALL_PROFILE, tuning_run
from wattwise.cli.main import main
from wattwise.store.limits_memory import LimitsMemory, memory_key

JOB = ("job=nightly", *SMALL_PROFILE)  # 5 limits, 300 W down to 100 W; 1 wait step, then 3 steps a limit


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.sqlite"
    monkeypatch.setenv("WATTWISE_STORE", str(path))
    return path


def test_a_short_run_keeps_its_profile_and_the_next_run_of_the_job_goes_on_from_there(
    tmp_path: Path, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tuning_run(tmp_path / "first", 1 + 2 * 3, overrides=JOB)  # room for 2 of the 5 limits
    tuner = first.run.power.tuner
    assert tuner is not None and not tuner.finished and len(tuner.profile) == 2
    key = memory_key("nightly", first.gpu.name, 1)
    memory = LimitsMemory()
    assert memory.recall(key) is None  # an unfinished profile is no choice
    assert [(p.profiled, p.limits) for p in memory.progress("nightly").values()] == [(2, 5)]
    assert any("keeps its profile of 2 of 5 limits for the job's next run" in s for s in first.said)

    assert main(["jobs", "show", "nightly", "--store", str(store)]) == 0
    assert f"profiling: 2 of 5 limits   {key}" in capsys.readouterr().out
    assert main(["jobs", "show", "nightly", "--store", str(store), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(p["key"], p["profiled"], p["limits"]) for p in shown["tuning_progress"]] == [(key, 2, 5)]

    # The first run's own time while tuning (its counter reads), made large here: the second run's tuning
    # cost is its own, as its steps are.
    kept = memory.recall_progress(key)
    assert kept is not None
    memory.save_progress(
        key, {**kept.state, "tuner": {**kept.state["tuner"], "own_time_s": 1000.0}}, profiled=2, limits=5
    )

    second = tuning_run(tmp_path / "second", 1 + 3 * 3 + 5, overrides=JOB)
    tuner = second.run.power.tuner
    assert tuner is not None and tuner.finished
    assert [e.power_limit_w for e in tuner.profile] == [300.0, 250.0, 200.0, 150.0, 100.0]
    assert set(tuner.steps_at) == {200.0, 150.0, 100.0}  # it profiled only the limits the first run had not
    assert tuner.own_time_s < 1000.0
    assert any("goes on from an earlier run" in s and "2 of 5 limits were profiled there" in s for s in second.said)
    remembered = memory.recall(key)
    assert remembered is not None and tuner.chosen is not None
    assert remembered.chosen.power_limit_w == tuner.chosen.power_limit_w
    assert memory.progress("nightly") == {}  # finished: the progress gives way to the choice


def test_another_objective_starts_afresh(tmp_path: Path, store: Path) -> None:
    tuning_run(tmp_path / "first", 1 + 2 * 3, overrides=JOB)
    other = tuning_run(tmp_path / "second", 1 + 5 * 3 + 2, overrides=(*JOB, "power_limit.eta=0.9"))
    tuner = other.run.power.tuner
    assert tuner is not None and tuner.finished
    assert tuner.steps_measured.get(300.0)  # the highest limit measured again
    assert not any("goes on from an earlier run" in s for s in other.said)
