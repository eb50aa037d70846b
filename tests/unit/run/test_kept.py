"""Every run is kept: two runs into one output folder each have their own folder (nothing overwritten), `latest`
points at the last, and each has its row in the run history, naming its own folder; a store that cannot be
reached spools the row and the run still ends with its summary."""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import warnings
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning
from wattwise.profile import ProfileEntry
from wattwise.record.files import read_run_dir
from wattwise.record.kept import LATEST, leave_late_note, summary_written_without, time_cost_s
from wattwise.record.summary import PowerLimitSummary, RankNote, RunSummary, TuningSummary, rank_notes_text
from wattwise.run import Run
from wattwise.run.history import keep_run
from wattwise.store import spool
from wattwise.store import sql as sql_store
from wattwise.store.limits_memory import LimitsMemory
from wattwise.store.runs import list_runs
from wattwise.tools.workload import emulate_step
from wattwise.vocabulary import RankNoteKind

QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false"]


def one_run(out: Path, store: Path | str, *overrides: str, start_s: float = 1_796_119_200.0) -> Run:
    clock = VirtualClock(start_s)
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*QUIET, f"output_dir={out}", "job=bert/squad", *overrides])
    run = Run(cfg, devices=[gpu], wall_clock=clock, limits_memory=LimitsMemory(str(store)))
    run.start()
    for _ in range(3):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.finish()
    return run


def test_two_runs_into_one_folder_keep_their_own_folders_and_rows(tmp_path: Path) -> None:
    out, store = tmp_path / "wattwise_runs", tmp_path / "jobs.sqlite"
    one_run(out, store, "power_limit.mode=cap", "power_limit.cap_w=200")
    first = list_runs(location=str(store))
    assert len(first) == 1
    first_summary = (Path(first[0].folder) / "summary.json").read_text()
    one_run(out, store, start_s=1_796_122_800.0)
    rows = list_runs(job="bert/squad", location=str(store))
    assert [(r.mode, r.power_limit_w, r.simulated, r.status) for r in rows] == [
        ("cap", 200.0, True, "completed"),
        ("measure", None, True, "completed"),
    ]
    assert [Path(r.folder).parent for r in rows] == [out.absolute() / "runs"] * 2
    assert (Path(rows[0].folder) / "summary.json").read_text() == first_summary  # not overwritten
    assert json.loads(first_summary)["power_limit"]["mode"] == "cap"
    assert os.readlink(out / LATEST) == f"runs/{rows[1].id}"
    assert read_run_dir(out / LATEST).summary == read_run_dir(out).summary  # the output folder: the last run
    assert rows[1].energy_j == read_run_dir(out).summary.energy_j > 0
    assert {p.name for p in Path(rows[1].folder).iterdir()} >= {"summary.json", "windows.csv"}


def test_a_run_into_a_local_store_leaves_its_row_in_the_inbox_without_opening_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, real = tmp_path / "jobs.sqlite", sql_store.SqlJobStore

    def not_at_the_end_of_a_run(url: str, **_options: object) -> sql_store.SqlJobStore:
        raise AssertionError("a training run's end opened the SQLite store")

    monkeypatch.setattr(sql_store, "SqlJobStore", not_at_the_end_of_a_run)
    run = one_run(tmp_path / "out", store)
    assert run.final_summary is not None
    assert len(spool.pending(LimitsMemory(str(store)).url)) == 1
    monkeypatch.setattr(sql_store, "SqlJobStore", real)  # the next reader shows the row; a writer delivers it
    assert [r.energy_j for r in list_runs(location=str(store))] == [run.final_summary.energy_j]
    assert len(spool.pending(LimitsMemory(str(store)).url)) == 1
    real(LimitsMemory(str(store)).url).close()
    assert spool.pending(LimitsMemory(str(store)).url) == []
    assert [r.energy_j for r in list_runs(location=str(store))] == [run.final_summary.energy_j]


def test_a_run_whose_server_store_is_unreachable_ends_with_its_summary_and_its_row_spooled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = "postgresql://wattwise@127.0.0.1:1/wattwise"

    def unreachable(url: str, **_options: object) -> sql_store.SqlJobStore:
        raise spool.StoreUnavailable("cannot reach the job store", url=url, reason="connection refused")

    monkeypatch.setattr(sql_store, "SqlJobStore", unreachable)
    with pytest.warns(EnergyPluginWarning, match="the store could not be reached; run .* waits in"):
        run = one_run(tmp_path / "out", server)
    assert run.final_summary is not None
    (spooled,) = spool.pending(LimitsMemory(server).url)
    assert json.loads(spooled.read_text())["energy_j"] == run.final_summary.energy_j


def test_the_time_cost_of_a_saving_is_the_steps_at_the_chosen_limit_times_their_slowdown() -> None:
    profile = (ProfileEntry(300.0, 0.50, 150.0), ProfileEntry(200.0, 0.55, 120.0))
    limit = PowerLimitSummary(
        mode="tune",
        chosen_power_limit_w=200.0,
        profile=profile,
        energy_saved_j=3000.0,
        baseline_energy_j=20000.0,
        tuning=TuningSummary(finished=True, profiled=(300.0, 200.0), steps_at_chosen=100),
    )
    assert time_cost_s(limit) == pytest.approx(5.0)
    assert time_cost_s(PowerLimitSummary(mode="cap", chosen_power_limit_w=200.0)) is None


def _refused_history(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The run history's store cannot be written: its folder, `folder`, may not be created (a read-only home)."""
    from wattwise.store import runs

    def refused(row: object, *, location: str | None = None) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(folder))

    monkeypatch.setattr(runs, "record_run_at_end", refused)


def _summary_of_a_run_without_journal(tmp_path: Path, journal: Path) -> RunSummary:
    out = tmp_path / "out"
    one_run(out, tmp_path / "jobs.sqlite")
    said = (
        f"measurement only: cannot create the journal folder {journal} (Permission denied): no GPU setting is changed"
    )
    return dataclasses.replace(read_run_dir(out).summary, notes=(said,))


def test_a_history_refused_for_the_cause_the_journal_was_is_logged_not_warned_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    home = tmp_path / "ro"
    summary = _summary_of_a_run_without_journal(tmp_path, home / ".local" / "state" / "wattwise" / "journal")
    _refused_history(monkeypatch, home / ".local")
    with warnings.catch_warnings():
        warnings.simplefilter("error", EnergyPluginWarning)
        with caplog.at_level(logging.INFO, logger="wattwise"):
            assert keep_run(tmp_path / "out", summary) is None
    (logged,) = [r.getMessage() for r in caplog.records if "not in the run history" in r.getMessage()]
    assert str(home / ".local") in logged and "Permission denied" in logged  # the why is kept


def test_a_history_refused_for_another_cause_than_the_journal_is_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _summary_of_a_run_without_journal(tmp_path, tmp_path / "ro" / ".local" / "state" / "wattwise" / "journal")
    _refused_history(monkeypatch, tmp_path / "elsewhere" / "store")  # the history's folder, not the home
    with pytest.warns(EnergyPluginWarning, match=r"not in the run history: .*Permission denied.*store"):
        assert keep_run(tmp_path / "out", summary) is None


def _ended_apart(output: Path, rank_notes: list[RankNote]) -> RunSummary:
    """A two-process run's summary written into `output`, with what it says of its processes."""
    summary = RunSummary(
        status="interrupted",
        start_time="2026-01-01T00:00:00+00:00",
        end_time="2026-01-01T00:01:40+00:00",
        time_s=100.0,
        energy_j=2_000.0,
        world_size=2,
        notes=("a note of the run's own", *rank_notes_text(rank_notes)),
        rank_notes=tuple(rank_notes),
    )
    output.mkdir(parents=True, exist_ok=True)
    (output / "summary.json").write_text(summary.to_json())
    return summary


def test_a_late_process_finds_itself_only_among_the_ranks_the_summary_says_left_no_figures(tmp_path: Path) -> None:
    _ended_apart(tmp_path, [RankNote(RankNoteKind.NO_FIGURES, r, waited_s=3.0) for r in (2, 12)])
    assert summary_written_without(tmp_path, 2, since_s=0.0)
    assert summary_written_without(tmp_path, 12, since_s=0.0)
    assert not summary_written_without(tmp_path, 1, since_s=0.0)  # nor rank 1 in "rank 12"
    assert not summary_written_without(tmp_path, 2, since_s=4e9)  # a summary older than this run's start


def test_a_late_process_decides_from_the_summary_s_values_never_from_its_notes_text(tmp_path: Path) -> None:
    # A note that reads as the main process's (a user's label, an older release) names no rank for the code.
    (tmp_path / "summary.json").write_text(
        json.dumps(
            {
                "start_time": "2026-01-01T00:00:00+00:00",
                "end_time": "2026-01-01T00:01:40+00:00",
                "energy_j": 1.0,
                "notes": ["rank 2 left no figures within 3 s of the main process's end"],
            }
        )
    )
    assert not summary_written_without(tmp_path, 2, since_s=0.0)


def test_a_late_process_leaves_its_own_note_and_the_reader_merges_it_in_place_of_no_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    own = out / "runs" / "run-1"
    written = _ended_apart(own, [RankNote(RankNoteKind.NO_FIGURES, 1, waited_s=3.0)])
    (out / "summary.json").write_text(written.to_json())
    (out / "latest").symlink_to(Path("runs") / "run-1")
    (out / "interrupted-rank1.json").write_text(json.dumps({"rank": 1, "energy": {"rank1/gpu0": 123.4}}))
    before = {folder: (folder / "summary.json").read_bytes() for folder in (out, own)}

    leave_late_note(out, 1, 123.4, figures_file="interrupted-rank1.json")

    for folder in (out, own):
        assert (folder / "summary.json").read_bytes() == before[folder]  # the main process's file, untouched
        summary = read_run_dir(folder).summary
        late = [n for n in summary.notes if n.startswith("rank 1 left its figures after this summary was written")]
        assert len(late) == 1 and "interrupted-rank1.json" in late[0] and "123.4 J" in late[0], summary.notes
        assert not [n for n in summary.notes if "left no figures" in n], summary.notes
        assert "a note of the run's own" in summary.notes
        assert [(n.kind, n.rank) for n in summary.rank_notes] == [
            (RankNoteKind.NO_FIGURES, 1),
            (RankNoteKind.LATE, 1),
        ]
    assert (own / "interrupted-rank1.json").exists()  # the figures are beside the run's own summary too


def test_a_late_note_for_a_rank_the_summary_did_not_miss_is_not_merged(tmp_path: Path) -> None:
    _ended_apart(tmp_path, [RankNote(RankNoteKind.NO_FIGURES, 1, waited_s=3.0)])
    note = RankNote(RankNoteKind.LATE, 2, detail="interrupted-rank2.json", energy_j=5.0)
    (tmp_path / "late-rank2.json").write_text(json.dumps(note.to_dict()))
    (tmp_path / "late-rank1.json").write_text("{not json")
    summary = read_run_dir(tmp_path).summary
    assert [(n.kind, n.rank) for n in summary.rank_notes] == [(RankNoteKind.NO_FIGURES, 1)]
    assert any("rank 1 left no figures" in n for n in summary.notes)
