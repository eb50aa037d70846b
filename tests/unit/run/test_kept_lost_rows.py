"""A run's row reaches the history whatever its output folder holds: `OUTPUT/latest` a real folder, `OUTPUT/runs`
a file or a symbolic link (never followed), or a spool folder another user made first in a shared home.
Each case is one warning saying where the run is kept; nothing recorded is lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning
from wattwise.run import Run
from wattwise.store import spool
from wattwise.store.limits_memory import LimitsMemory
from wattwise.store.runs import list_runs
from wattwise.tools.workload import emulate_step


def one_run(out: Path, store: Path) -> Run:
    """Three steps of a measured run on a simulated GPU into `out`, its history in `store`."""
    clock = VirtualClock(1_796_119_200.0)
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    quiet = ["monitor.sample_power=false", "monitor.sync_cuda=false", f"output_dir={out}", "job=bert/squad"]
    run = Run(load_config(overrides=quiet), devices=[gpu], wall_clock=clock, limits_memory=LimitsMemory(str(store)))
    run.start()
    for _ in range(3):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.finish()
    return run


def test_a_real_latest_folder_is_left_as_it_is_and_the_run_is_kept(tmp_path: Path) -> None:
    out, store = tmp_path / "out", tmp_path / "jobs.sqlite"
    (out / "latest").mkdir(parents=True)
    (out / "latest" / "mine.txt").write_text("mine")
    with pytest.warns(EnergyPluginWarning, match=r"latest is not the link wattwise keeps there .* left as it is"):
        one_run(out, store)
    (row,) = list_runs(location=str(store))
    assert Path(row.folder).parent == (out / "runs").absolute() and (Path(row.folder) / "summary.json").is_file()
    assert (out / "latest" / "mine.txt").read_text() == "mine"


@pytest.mark.parametrize("runs", ["file", "link"])
def test_a_runs_that_is_a_file_or_a_link_keeps_the_row_pointing_at_the_output_folder(tmp_path: Path, runs: str) -> None:
    out, store, elsewhere = tmp_path / "out", tmp_path / "jobs.sqlite", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    if runs == "file":
        (out / "runs").write_text("not a folder")
    else:
        (out / "runs").symlink_to(elsewhere, target_is_directory=True)
    with pytest.warns(EnergyPluginWarning, match=r"could not be kept in a folder of their own .*runs: "):
        one_run(out, store)
    (row,) = list_runs(location=str(store))
    assert row.folder == str(out.absolute()) and os.listdir(elsewhere) == []


def test_a_spool_folder_another_user_made_first_does_not_lose_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "jobs.sqlite"

    def not_yours(url: str) -> Path:
        raise PermissionError(13, f"spool folder {spool.spool_dir(url)}: owned by uid 1234")

    monkeypatch.setattr(spool, "own_spool_dir", not_yours)
    run = one_run(tmp_path / "out", store)
    assert [r.energy_j for r in list_runs(location=str(store))] == [run.final_summary.energy_j]
    assert spool.pending(LimitsMemory(str(store)).url) == []


def test_a_row_that_can_be_written_nowhere_says_where_the_run_is_and_runs_add_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from wattwise.cli.main import main
    from wattwise.store import runs

    store = tmp_path / "jobs.sqlite"

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    real = runs.record_run_at_end
    monkeypatch.setattr(runs, "record_run_at_end", full)
    with pytest.warns(EnergyPluginWarning, match=r"not in the run history: .*No space left.*`wattwise runs add (\S+)`"):
        one_run(tmp_path / "out", store)
    monkeypatch.setattr(runs, "record_run_at_end", real)
    assert list_runs(location=str(store)) == []
    (own,) = (tmp_path / "out" / "runs").iterdir()
    assert main(["runs", "add", str(own), "--store", str(store)]) == 0
    assert capsys.readouterr().out.strip() == f"added run {own.name} ({own}) to the history"
    (row,) = list_runs(location=str(store))
    assert row.id == own.name and row.folder == str(own)


def test_a_full_home_disk_at_the_end_keeps_the_row_in_the_runs_folder_and_the_next_run_adds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the spool nor the store can be written (ENOSPC): one warning says where the row is kept, and the
    next run into the same output folder adds it to the history."""
    import errno

    from wattwise.record.kept import RUNS_FOLDER
    from wattwise.store import runs

    out, store = tmp_path / "out", tmp_path / "jobs.sqlite"

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as disk:
        disk.setattr(spool, "spool_run", full)
        disk.setattr(runs, "record_run", full)
        with pytest.warns(EnergyPluginWarning) as warned:
            first = one_run(out, store)
    (message,) = [str(w.message) for w in warned]
    (own,) = (out / "runs").iterdir()
    kept = own / runs.KEPT_ROW
    assert f"its row is kept in {kept} until the end of the next run into {out}, which adds it" in message
    assert "No space left on device" in message and kept.is_file() and runs.RUNS_FOLDER == RUNS_FOLDER
    assert list_runs(location=str(store)) == []
    second = one_run(out, store)  # the disk has room again
    listed = list_runs(location=str(store))
    assert [r.id for r in listed] == sorted([own.name, next(p.name for p in (out / "runs").iterdir() if p != own)])
    assert sorted(r.energy_j for r in listed) == sorted([first.final_summary.energy_j, second.final_summary.energy_j])
    assert not kept.exists()
