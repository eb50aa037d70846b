"""`wattwise runs list|show|compare|forget` and the remembered limits of `wattwise jobs show|forget-limit`, on a
real SQLite store: what a user sees, the JSON contract, and exit codes with their one-line message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.run_history import T0_S, make_row
from tests.support.run_records import PAYBACK, TUNED_PAID, write_tuned_run
from wattwise.cli.main import main
from wattwise.profile import ProfileEntry
from wattwise.record.files import read_run_dir
from wattwise.record.kept import run_row
from wattwise.record.summary import payback_lines
from wattwise.store.limits_memory import LimitsMemory, memory_key
from wattwise.store.runs import record_run

#: The fields every run of `wattwise runs list --json` has (a contract).
CONTRACT = {
    "id", "job", "framework", "mode", "status", "start_time", "end_time", "time_s", "energy_j",
    "energy_uncertainty_j", "power_limit_w", "saving_j", "time_cost_s", "simulated", "folder",
}  # fmt: skip
BASE, CAPPED, OTHER = "20261201T100000Z-aaaaaa", "20261201T110000Z-bbbbbb", "20261201T120000Z-cccccc"


@pytest.fixture
def store(tmp_path: Path) -> str:
    location = str(tmp_path / "jobs.sqlite")
    record_run(make_row(BASE, mode="measure", power_limit_w=None, saving_j=None, time_cost_s=None), location=location)
    record_run(
        make_row(CAPPED, start_s=T0_S + 3600, mode="cap", power_limit_w=175.0, energy_j=27_000.0, time_s=131.0),
        location=location,
    )
    record_run(
        make_row(OTHER, start_s=T0_S + 7200, job="gpt/pretrain", status="failed", energy_j=30_100.0), location=location
    )
    return location


def out_json(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out)


def test_list_json_gives_every_run_with_the_contract_fields(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--store", store, "--json"]) == 0
    runs = out_json(capsys)["runs"]
    assert [r["id"] for r in runs] == [BASE, CAPPED, OTHER]
    assert all(set(r) >= CONTRACT for r in runs)
    assert (runs[1]["mode"], runs[1]["power_limit_w"], runs[1]["energy_j"], runs[1]["simulated"]) == (
        "cap", 175.0, 27_000.0, True
    )  # fmt: skip
    assert runs[0]["start_time"] == "2026-12-01T10:00:00+00:00"


def test_list_filters_by_job_status_and_start(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--store", store, "--json", "--job", "bert/squad"]) == 0
    assert [r["id"] for r in out_json(capsys)["runs"]] == [BASE, CAPPED]
    assert main(["runs", "list", "--store", store, "--json", "--status", "failed"]) == 0
    assert [r["id"] for r in out_json(capsys)["runs"]] == [OTHER]
    assert main(["runs", "list", "--store", store, "--json", "--since", "2026-12-01T10:30:00Z"]) == 0
    assert [r["id"] for r in out_json(capsys)["runs"]] == [CAPPED, OTHER]
    assert main(["runs", "list", "--store", store, "--json", "--since", "2026-12-02"]) == 0
    assert out_json(capsys)["runs"] == []
    assert main(["runs", "list", "--store", store]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 5 and CAPPED in table[2] and "simulated" in table[2]
    assert table[-1].startswith("* recorded before the history kept each run's one saving")  # rows without payback


def test_an_empty_history_lists_nothing_and_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "list", "--store", str(tmp_path / "none.sqlite"), "--json"]) == 0
    assert out_json(capsys) == {"runs": [], "unreadable": []}
    assert not (tmp_path / "none.sqlite").exists()


def test_show_gives_every_figure_and_the_folder(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", "20261201T11", "--store", store]) == 0
    shown = capsys.readouterr().out
    assert f"run {CAPPED} (simulated figures)" in shown
    assert "27000 ± 150 J" in shown and f"/runs/{CAPPED}" in shown and "175 W" in shown


def test_compare_says_whether_each_difference_exceeds_the_uncertainty(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "compare", BASE, CAPPED, OTHER, "--store", store, "--json"]) == 0
    diffs = out_json(capsys)["differences"]
    assert [(d["id"], d["energy_j"], d["energy_resolved"]) for d in diffs] == [
        (CAPPED, -3000.0, True),  # far beyond ±212 J
        (OTHER, 100.0, False),  # within it
    ]
    assert diffs[0]["energy_uncertainty_j"] == pytest.approx(212.13, abs=0.01)
    assert diffs[0]["time_s"] == 11.0
    assert main(["runs", "compare", BASE, CAPPED, "--store", store]) == 0
    text = capsys.readouterr().out
    assert "energy -3000 J (-10.0%), larger than the measurements' uncertainty (±212 J)" in text
    assert "simulated figures" in text


def test_forget_removes_the_run_and_leaves_its_folder(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "forget", CAPPED, "--store", store]) == 0
    assert f"forgot run {CAPPED}" in capsys.readouterr().out
    assert main(["runs", "list", "--store", store, "--json"]) == 0
    assert [r["id"] for r in out_json(capsys)["runs"]] == [BASE, OTHER]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "show", "20261201T130000Z-dddddd"], "no run '20261201T130000Z-dddddd' in the store"),
        (["runs", "show", "20261201T1"], "run id '20261201T1' is ambiguous"),
        (["runs", "show", "../etc"], "ID: '../etc' is not a run id"),
        (["runs", "compare", BASE], "ID: give two or more runs to compare"),
        (["runs", "list", "--since", "yesterday"], "--since: 'yesterday' is neither a date"),
        (["runs", "list", "--job", "bad..name"], "job: 'bad..name' is not a valid name"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    store: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--store", store]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_jobs_show_and_forget_a_limit_remembered_for_a_job_that_is_not_recurring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = str(tmp_path / "jobs.sqlite")
    memory = LimitsMemory(location)
    profile = [ProfileEntry(300.0, 0.45, 120.0), ProfileEntry(200.0, 0.5, 100.0)]
    memory.save(memory_key("bert/squad", "NVIDIA A40", 4), profile[1], profile, selector="zeus", eta=0.5)
    memory.save(memory_key("bert/squad", "NVIDIA H100", 8), profile[0], profile, selector="zeus", eta=0.5)
    memory.save(memory_key("bert_squad", "NVIDIA A40", 4), profile[1], profile)  # another job: `_` is no wildcard
    assert main(["jobs", "show", "bert/squad", "--store", location, "--json"]) == 0
    shown = out_json(capsys)
    assert shown["job"] is None
    assert [(limit["key"], limit["power_limit_w"]) for limit in shown["remembered_limits"]] == [
        ("bert/squad|NVIDIA A40|x4", 200.0),
        ("bert/squad|NVIDIA H100|x8", 300.0),
    ]
    assert main(["jobs", "forget-limit", "bert/squad", "--key", "bert/squad|NVIDIA H100|x8", "--store", location]) == 0
    assert "forgot 1 remembered power limit(s) of job bert/squad" in capsys.readouterr().out
    assert main(["jobs", "show", "bert/squad", "--store", location]) == 0
    text = capsys.readouterr().out
    assert "job bert/squad: not a recurring job" in text and "NVIDIA A40" in text and "H100" not in text
    assert main(["jobs", "forget-limit", "bert/squad", "--store", location]) == 0
    capsys.readouterr()
    assert main(["jobs", "show", "bert/squad", "--store", location]) == 2
    assert "no job named 'bert/squad'" in capsys.readouterr().err
    assert memory.recall(memory_key("bert_squad", "NVIDIA A40", 4)) is not None


def test_show_list_and_compare_give_the_runs_saving_as_its_end_of_run_text_does(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose summary.json has its payback: `runs show` gives the three figures of the end-of-run text, in
    order, and `runs list` and `runs compare` give this run's saving, tuning included (1430 J, not the row's
    4500 J, which leaves tuning's cost out)."""
    paid_id = "20261201T130000Z-dddddd"
    folder = write_tuned_run(tmp_path / "runs" / paid_id, power_limit=TUNED_PAID)
    record_run(run_row(read_run_dir(folder).summary, run_id=paid_id, folder=folder), location=store)  # as it ends
    expected = payback_lines(TUNED_PAID)
    assert expected is not None
    assert main(["runs", "show", paid_id, "--store", store]) == 0
    shown = [line.strip() for line in capsys.readouterr().out.splitlines()]
    at = shown.index(f"saving     {expected[0]}")
    assert shown[at + 1 : at + 3] == list(expected[1:])
    assert "1430 ± 150 J saved" in expected[2] and "tuning paid back after 25 steps at 175 W" in expected[2]
    assert main(["runs", "show", paid_id, "--store", store, "--json"]) == 0
    payback = out_json(capsys)["payback"]
    assert (payback["run_energy_saved_j"], payback["break_even_steps"], payback["paid_back"]) == (1432.0, 25, True)
    assert main(["runs", "list", "--store", store]) == 0
    listed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(paid_id))
    assert "1430 ± 150" in listed and "4500" not in listed
    assert main(["runs", "compare", BASE, paid_id, "--store", store]) == 0
    saving = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("saving"))
    assert "1430 ± 150 J" in saving and "4500" not in saving


def test_list_gives_each_runs_one_saving_from_the_history_and_marks_a_row_recorded_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The saved column and `--json`'s `payback` come from the history's row (its folder is gone here); a row
    recorded before the history kept the payback gives its old figure, marked, with a line saying what it is."""
    import dataclasses
    import shutil

    location = str(tmp_path / "jobs.sqlite")
    paid_id = "20261201T130000Z-dddddd"
    folder = write_tuned_run(tmp_path / "runs" / paid_id, power_limit=TUNED_PAID)
    record_run(run_row(read_run_dir(folder).summary, run_id=paid_id, folder=folder), location=location)
    shutil.rmtree(folder)
    old = dataclasses.replace(make_row(BASE), saving_uncertainty_j=40.0)
    record_run(old, location=location)
    assert main(["runs", "list", "--store", location]) == 0
    lines = capsys.readouterr().out.splitlines()
    paid = next(line for line in lines if line.startswith(paid_id))
    assert "1430 ± 150" in paid and "*" not in paid
    assert "4500 ± 40*" in next(line for line in lines if line.startswith(BASE))
    assert lines[-1].startswith("* recorded before the history kept each run's one saving")
    assert main(["runs", "list", "--store", location, "--json"]) == 0
    runs = {r["id"]: r for r in out_json(capsys)["runs"]}
    assert runs[paid_id]["payback"] == {
        "run_energy_saved_j": 1432.0,
        "run_energy_saved_uncertainty_j": PAYBACK.run_energy_saved_uncertainty_j,
        "run_time_added_s": PAYBACK.run_time_added_s,
        "break_even_steps": 25,
        "paid_back": True,
    }
    assert runs[BASE]["payback"] is None and runs[BASE]["saving_j"] == 4500.0  # the old field, kept
    assert main(["runs", "show", paid_id, "--store", location]) == 0  # its folder gone: the history's figures
    (saving,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  saving")]
    assert "this run: 1430 ± 150 J" in saving and "tuning included; tuning paid back (break-even 25 steps" in saving
