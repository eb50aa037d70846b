"""A run of several processes that end apart (issue 27): SIGTERM in a script with no handler of its own, or
an exception (Lightning's `on_exception` under DDP). The run's last words make no collective: each process
leaves its figures in the output folder; the main one writes the summary from those that came, naming how
each rank ended and the ranks that left nothing."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import wattwise.run.agreement
from tests.support.clock import VirtualClock
from tests.support.two_processes import TUNE, TwoProcesses
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.record.files import read_summary
from wattwise.run import Run
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.workload import emulate_step


class Silent(TwoProcesses):
    """A process of two that may no longer exchange anything (the other may be gone)."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank
        self.closed = False

    def all_gather(self, obj: object) -> list[object]:
        assert not self.closed, "a collective after the signal"
        return super().all_gather(obj)

    def combine(self, windows):  # type: ignore[no-untyped-def]
        assert not self.closed, "a collective after the signal"
        return super().combine(windows)


@pytest.fixture(autouse=True)
def sigterm_handler() -> Iterator[object]:
    """This process's SIGTERM handler, put back after the test: the last words at a signal ignore a second
    SIGTERM (the guard then ends the process)."""
    found = signal.getsignal(signal.SIGTERM)
    yield found
    signal.signal(signal.SIGTERM, found)


def signalled_rank(
    tmp_path: Path, rank: int, monkeypatch: pytest.MonkeyPatch, *, signalled: bool = True
) -> tuple[Run, SimulatedGPU]:
    """Rank `rank` of two, tuning its simulated GPU for 4 steps; then SIGTERM reached it (its guard restored),
    unless not `signalled`."""
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / f"home{rank}"))
    clock = VirtualClock()
    gpu = SimulatedGPU(rank, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    gpu.set_power_limit_w(250.0)  # its own limit
    coll = Silent(rank)
    cfg = load_config(overrides=[*TUNE[:5], f"output_dir={tmp_path / 'run'}"])
    run = Run(cfg, devices=[gpu], wall_clock=clock, collective=coll, settings_guard=SettingsGuard)
    run.start()
    for _ in range(4):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    guard = run.power.guard
    assert guard is not None and gpu.power_limit_w() == 200.0  # tuning's second limit
    if signalled:
        guard.signalled = signal.SIGTERM
        guard.restore_all()
    coll.closed = True
    return run, gpu


def test_the_main_process_writes_the_summary_from_every_process_that_left_its_figures(tmp_path, monkeypatch):
    other, _ = signalled_rank(tmp_path, 1, monkeypatch)
    main, gpu = signalled_rank(tmp_path, 0, monkeypatch)
    other._last_words()
    assert other.final_summary is None and (tmp_path / "run" / "interrupted-rank1.json").is_file()
    with pytest.warns(wattwise.run.EnergyPluginWarning, match="tuning did not finish"):  # 4 steps of 10
        main._last_words()  # the main process says it, for the run
    assert gpu.power_limit_w() == 250.0
    summary = read_summary(tmp_path / "run" / "summary.json")
    assert (summary.status, summary.steps, summary.world_size) == ("interrupted", 4, 2)
    assert sorted(summary.energy_per_device_j) == ["rank0/gpu0", "rank1/gpu1"]
    assert summary.energy_j == pytest.approx(sum(summary.energy_per_device_j.values()))
    assert [(e.device, e.value) for e in summary.settings_timeline] == [
        ("rank0/gpu0", 300.0),
        ("rank0/gpu0", 200.0),
        ("rank1/gpu1", 300.0),
        ("rank1/gpu1", 200.0),
    ]
    assert any(n.startswith("SIGTERM reached rank 0, rank 1: each restored") for n in summary.notes)
    assert not list((tmp_path / "run").glob("interrupted-rank*"))  # taken
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # until the guard ends the process


def test_a_limit_lifted_on_another_ranks_gpu_reaches_the_summary_written_alone(tmp_path, monkeypatch):
    lifted = "GPU 1: its power limit is 300 W, not the 200 W this job set through the node agent"
    other, other_gpu = signalled_rank(tmp_path, 1, monkeypatch)
    other_gpu.settings_lifted = lambda: lifted  # type: ignore[method-assign]
    main, _ = signalled_rank(tmp_path, 0, monkeypatch)
    other._last_words()
    with pytest.warns(wattwise.run.EnergyPluginWarning) as said:
        main._last_words()
    summary = read_summary(tmp_path / "run" / "summary.json")
    assert [n for n in summary.notes if lifted in n] == [f"rank 1: {lifted}"]
    assert [str(w.message) for w in said if lifted in str(w.message)] == [f"wattwise: rank 1: {lifted}"]


def test_ranks_that_raised_end_apart_with_a_summary_and_their_gpus_restored(tmp_path, monkeypatch, sigterm_handler):
    ranks = [signalled_rank(tmp_path, rank, monkeypatch, signalled=False) for rank in (1, 0)]
    with pytest.warns(wattwise.run.EnergyPluginWarning, match="tuning did not finish"):
        records = [run.finish_alone("failed", RuntimeError("Connection closed by peer")) for run, _ in ranks]
    assert records[0] is None and records[1] is not None  # rank 1 left its figures; rank 0 wrote the summary
    assert [gpu.power_limit_w() for _, gpu in ranks] == [250.0, 250.0]
    summary = ranks[1][0].summary
    assert summary is not None and (summary["status"], summary["steps"]) == ("failed", 4)
    assert sorted(summary["energy_per_device_j"]) == ["rank0/gpu0", "rank1/gpu1"]
    assert (
        "rank 0, rank 1 raised RuntimeError: each restored its GPU settings and ended on its own; the figures "
        "are theirs up to then" in summary["notes"]
    )
    assert signal.getsignal(signal.SIGTERM) == sigterm_handler  # not at a signal: SIGTERM is left alone


@pytest.mark.parametrize("left", [None, "{not json"])
def test_a_rank_that_left_nothing_readable_is_named_and_its_energy_is_missing(tmp_path, monkeypatch, left):
    monkeypatch.setattr(wattwise.run.agreement, "SIGNALLED_WAIT_S", 0.0)
    main, _ = signalled_rank(tmp_path, 0, monkeypatch)
    if left is not None:
        (tmp_path / "run" / "interrupted-rank1.json").write_text(left)  # not one of ours
    with pytest.warns(wattwise.run.EnergyPluginWarning, match="tuning did not finish"):
        main._last_words()
    raw = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert list(raw["energy_per_device_j"]) == ["rank0/gpu0"]
    said = [n for n in raw["notes"] if n.startswith("rank 1")]
    if left is None:
        assert said == [
            "rank 1 left no figures within 0 s of the main process's end (a process still waiting in a "
            "collective for this one leaves them only once that collective fails): their energy is "
            "missing; each process restores its own GPU settings as it ends"
        ]
    else:
        assert said == [
            "rank 1: its interrupted-rank1.json is not one wattwise wrote (not JSON (Expecting property "
            "name enclosed in double quotes: line 1 column 2 (char 1))): its energy is missing"
        ]


def test_figures_an_earlier_run_left_behind_are_removed_when_the_next_run_starts(tmp_path, monkeypatch):
    stale = tmp_path / "run" / "interrupted-rank1.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    signalled_rank(tmp_path, 0, monkeypatch, signalled=False)
    assert not stale.exists()


def test_a_rank_whose_measurement_failed_still_ends_its_settings_guard_and_leaves_no_figures(
    tmp_path, monkeypatch, sigterm_handler
):
    run, gpu = signalled_rank(tmp_path, 1, monkeypatch, signalled=False)
    with pytest.warns(wattwise.run.EnergyPluginWarning, match="energy measurement failed"):
        run._stop_measuring(RuntimeError("the sampler died"))
    assert run.finish_alone("failed", RuntimeError("Connection closed by peer")) is None
    assert run.finished and gpu.power_limit_w() == 250.0
    assert signal.getsignal(signal.SIGTERM) == sigterm_handler  # the guard's handler is gone with the guard
    assert not list((tmp_path / "run").glob("interrupted-rank*"))  # nothing measured: nothing to leave
