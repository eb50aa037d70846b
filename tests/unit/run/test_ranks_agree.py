"""Ranks must agree, seen from one process of two: a failed change waits for a decision point.

The other process is scripted (`TwoProcesses`): whether it failed, and why. The two-process runs themselves
are in tests/integration/{lightning_energy,accelerate_energy}/test_ranks_agree.py.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import wattwise.run.measurement
from tests.support.clock import VirtualClock
from tests.support.two_processes import TUNE, TwoProcesses
from wattwise.config import load_config
from wattwise.devices import (
    DeviceLostError,
    Discovery,
    NoPermissionError,
    NotSupportedError,
    Physics,
    PowerModel,
    SimulatedGPU,
)
from wattwise.distributed import Collective
from wattwise.errors import EnergyPluginWarning
from wattwise.run import Run
from wattwise.tools.workload import emulate_step


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def make_run(tmp_path: Path, collective: TwoProcesses) -> tuple[Run, SimulatedGPU]:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*TUNE, f"output_dir={tmp_path / 'run'}"])
    return Run(cfg, devices=[gpu], wall_clock=clock, collective=collective), gpu


def train(run: Run, gpu: SimulatedGPU, collective: TwoProcesses, steps: int) -> list[float]:
    """`steps` optimizer steps; the GPU's limit during each."""
    limits = []
    for _ in range(steps):
        collective.step += 1
        run.step_begin()
        limits.append(gpu.power_limit_w())
        emulate_step([gpu], lambda: None)
        run.step_end()
    return limits


def test_a_change_that_failed_in_the_other_process_degrades_this_one_at_the_next_window_end(tmp_path):
    collective = TwoProcesses(fails_at=4)
    run, gpu = make_run(tmp_path, collective)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        limits = train(run, gpu, collective, 12)
        run.finish()
    # Asked twice at the start (anything to measure? could every process change its GPU?) and at each
    # window's end while tuning (steps 3 and 6); not on the other steps.
    assert collective.asked == [0, 0, 3, 6]
    assert limits == [300.0] * 3 + [200.0] * 3 + [300.0] * 6  # 200 W until every process degraded together
    assert run.power.mode == "measure" and gpu.power_limit_w() == 300.0
    [warned] = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert warned.startswith("wattwise: rank 1: setting the power limit to 200 W failed (gpu1: the GPU has fallen")
    note = warned.removeprefix("wattwise: ").split(" (set strict")[0]
    assert run.summary is not None and note in run.summary["notes"]  # the summary says it too


def test_a_change_that_failed_here_restores_at_once_and_waits_for_the_others(tmp_path):
    collective = TwoProcesses()
    run, gpu = make_run(tmp_path, collective)
    run.start()
    original = SimulatedGPU.set_power_limit_w

    def refused(self: SimulatedGPU, watts: float) -> None:
        if watts < 300:
            raise NoPermissionError("gpu0: insufficient permissions")
        original(self, watts)

    with warnings.catch_warnings(record=True), pytest.MonkeyPatch.context() as mp:
        warnings.simplefilter("always")
        mp.setattr(SimulatedGPU, "set_power_limit_w", refused)
        limits = train(run, gpu, collective, 4)  # the change to 200 W fails at step 4
        assert run.power.suspended is not None and run.power.mode == "tune"  # no decision point yet
        assert run.power.tuner is not None  # still counting, as the other process does
        train(run, gpu, collective, 2)  # step 6 ends the window: every process degrades
    assert limits == [300.0] * 4
    assert run.power.mode == "measure" and run.power.suspended is None
    assert any(n.startswith("rank 0: setting the power limit to 200 W failed") for n in run._noticed)


class Lockstep(Collective):
    """One of two ranks run as threads of this process, exchanging for real: each collective waits for the
    other rank's, and both must be the same operation (else the run would mismatch or hang: `mismatch`)."""

    def __init__(self, rank: int, shared: dict[str, Any]) -> None:
        self.rank, self.world_size = rank, 2
        self._shared = shared
        #: Every collective this rank issued, by name.
        self.issued: list[str] = []

    def _exchange(self, op: str, value: Any) -> list[Any]:
        self.issued.append(op)
        slots, barrier = self._shared["slots"], self._shared["barrier"]
        slots[self.rank] = (op, value)
        barrier.wait(timeout=30)
        (op0, v0), (op1, v1) = slots
        barrier.wait(timeout=30)  # both read the slots before either writes the next
        if op0 != op1:
            self._shared["mismatch"] = (op0, op1)
            raise RuntimeError(f"collective mismatch: rank 0 {op0}, rank 1 {op1}")
        return [v0, v1]

    def all_gather(self, obj: Any) -> list[Any]:
        return self._exchange("all_gather", obj)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return self._exchange("broadcast", obj)[src]

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        both = self._exchange(f"combine{len(windows)}", list(windows))
        return [(max(a[0], b[0]), a[1] + b[1]) for a, b in zip(*both, strict=True)]


def two_ranks(
    tmp_path: Path,
    rank_setup: Callable[[int, SimulatedGPU | None], None],
    *,
    steps: int = 12,
    overrides: Sequence[str] = (),
    physics: Sequence[Physics | None] = (None, None),
) -> tuple[list[Run], list[Lockstep], list[str]]:
    """Two ranks (threads) training `steps` steps in lockstep, each with its own simulated GPU, which
    `rank_setup` may change (a GPU it marks `absent`: that rank finds no device; `unopenable = why`: that
    rank's devices cannot be opened, as a backend named in the configuration that its node lacks); the runs,
    their collectives and the warnings."""
    shared: dict[str, Any] = {"slots": [None, None], "barrier": threading.Barrier(2), "mismatch": None}
    colls = [Lockstep(rank, shared) for rank in range(2)]
    clocks = [VirtualClock(), VirtualClock()]
    gpus: list[SimulatedGPU | None] = [
        SimulatedGPU(
            rank,
            PowerModel.default(),
            base_step_time_s=0.1,
            clock=clocks[rank],
            sleep=clocks[rank].sleep,
            physics=physics[rank],
        )
        for rank in range(2)
    ]
    for rank in range(2):
        rank_setup(rank, gpus[rank])
    cfg = load_config(
        overrides=[
            "monitor.sample_power=false",
            "monitor.sync_cuda=false",
            "log_every_n_steps=4",
            *overrides,
            f"output_dir={tmp_path / 'run'}",
        ]
    )
    unopenable = [getattr(gpu, "unopenable", None) for gpu in gpus]
    runs = [
        Run(
            cfg,
            devices=None if unopenable[rank] else [] if getattr(gpus[rank], "absent", False) else [gpus[rank]],
            collective=colls[rank],
            wall_clock=clocks[rank],
        )
        for rank in range(2)
    ]
    errors: list[BaseException] = []
    discover = wattwise.run.measurement.discover

    def cannot_open(*args: Any, **kwargs: Any) -> Discovery:
        raise NotSupportedError(next(why for why in unopenable if why))

    wattwise.run.measurement.discover = cannot_open  # only a rank given no devices discovers them

    def train(rank: int) -> None:
        run, gpu = runs[rank], gpus[rank] if not unopenable[rank] else None
        try:
            run.start()
            for _ in range(steps):
                run.step_begin()
                emulate_step([gpu] if gpu is not None else [], lambda: None)
                run.step_end()
            run.finish()
        except BaseException as err:  # the test reports it
            errors.append(err)
            shared["barrier"].abort()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=train, args=(rank,)) for rank in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    wattwise.run.measurement.discover = discover
    assert not errors and shared["mismatch"] is None, (errors, shared["mismatch"])
    warned = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    return runs, colls, warned


def lose_gpu_after(reads: int) -> Callable[[int, SimulatedGPU | None], None]:
    """Rank 1's GPU answers `reads` energy reads, then has fallen off the bus."""

    def setup(rank: int, gpu: SimulatedGPU | None) -> None:
        if rank != 1 or gpu is None:
            return
        original, count = gpu.energy_j, [0]

        def energy_j() -> float:
            count[0] += 1
            if count[0] > reads:
                raise DeviceLostError("gpu1: the GPU has fallen off the bus")
            return original()

        gpu.energy_j = energy_j  # type: ignore[method-assign]

    return setup


def healthy(rank: int, gpu: SimulatedGPU | None) -> None:
    """Both ranks measure."""


def test_a_device_lost_on_one_rank_at_a_window_end_keeps_both_ranks_in_step_and_measuring(tmp_path):
    _, reference, _ = two_ranks(tmp_path / "healthy", healthy)
    runs, colls, warned = two_ranks(tmp_path / "lost", lose_gpu_after(3))  # lost at the first logging point
    # The same collectives on both ranks; the loss costs one gather and one repeated exchange, once.
    assert colls[0].issued == colls[1].issued
    extra = list(colls[0].issued)
    for op in reference[0].issued:
        extra.remove(op)
    assert sorted(extra) == ["all_gather"]
    assert all(run.measuring for run in runs)  # nobody stopped measuring alone (rank 1's windows time only)
    assert [w.split(" (set strict")[0] for w in warned] == [
        "wattwise: rank 1: energy measurement failed (gpu1: the GPU has fallen off the bus); its energy is left "
        "out of the run's figures, and the other processes go on measuring"
    ]
    summary = runs[0].summary
    assert summary is not None and summary["status"] == "completed" and summary["steps"] == 12
    assert warned[0].removeprefix("wattwise: ").split(" (set strict")[0] in summary["notes"]
    assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"]  # only what was measured
    assert summary["energy_j"] == pytest.approx(summary["energy_per_device_j"]["rank0/gpu0"])


def test_a_device_lost_on_one_rank_while_tuning_degrades_every_rank_together(tmp_path):
    # 300, 200, 100 W with windows ending at steps 3, 6, 9; rank 1's GPU is lost at the second window's end.
    runs, colls, warned = two_ranks(tmp_path, lose_gpu_after(5), overrides=TUNE[:5])
    assert colls[0].issued == colls[1].issued
    assert [run.power.mode for run in runs] == ["measure", "measure"]  # together
    assert len(warned) == 1 and warned[0].startswith("wattwise: rank 1: energy measurement failed")
    summary = runs[0].summary
    assert summary is not None  # no choice made from rank 0's energy alone, and the record says why
    pl = summary["power_limit"]
    assert pl["chosen_power_limit_w"] is None and pl["tuning"]["finished"] is False
    assert pl["tuning"]["reason"].startswith("abandoned: rank 1: energy measurement failed")
    assert [p["power_limit_w"] for p in pl["profile"]] == [300.0]  # what was profiled before
    # One note on the one cause, as warned: its energy is left out, and every process only measures.
    [degraded] = [n for n in summary["notes"] if n.startswith("rank 1: ")]
    assert degraded.startswith("rank 1: energy measurement failed") and "its energy is left out" in degraded
    assert degraded.endswith("every process continues with measurement only, so that the processes stay in step")
    assert warned[0] == f"wattwise: {degraded} (set strict=True to make this an error)"


def test_one_rank_with_nothing_to_measure_keeps_in_step_and_the_other_measures(tmp_path):
    def absent(rank: int, gpu: SimulatedGPU | None) -> None:
        if rank == 1 and gpu is not None:
            gpu.absent = True  # type: ignore[attr-defined]

    runs, colls, warned = two_ranks(tmp_path, absent)
    assert colls[0].issued == colls[1].issued and colls[0].issued[0] == "all_gather"  # asked once at the start
    assert len(warned) == 1 and warned[0].startswith(
        "wattwise: rank 1: nothing to measure (no GPU, and the CPU package's energy counter is not readable); "
        "the figures are the other processes'"
    )
    summary = runs[0].summary
    assert summary is not None and summary["steps"] == 12 and summary["world_size"] == 2
    assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"] and summary["energy_j"] > 0


NVML_MISSING = (
    "NVML unavailable: libnvidia-ml.so.1: cannot open shared object file; devices.backend is nvml, which "
    "needs an NVIDIA driver (use auto, or simulated to try wattwise without one)"
)


@pytest.mark.parametrize("mode", ["measure", "tune"])
def test_one_rank_whose_named_backend_cannot_open_keeps_in_step_and_the_other_measures(tmp_path, mode):
    def unopenable(rank: int, gpu: SimulatedGPU | None) -> None:
        if rank == 1 and gpu is not None:
            gpu.unopenable = NVML_MISSING  # type: ignore[attr-defined]

    overrides = TUNE if mode == "tune" else []
    runs, colls, warned = two_ranks(tmp_path, unopenable, overrides=overrides)  # it hung: rank 0 waited for ever
    assert colls[0].issued == colls[1].issued
    assert len(warned) == 1 and warned[0].startswith(
        f"wattwise: rank 1: opening its devices failed ({NVML_MISSING}); the figures are the other processes'"
    )
    summary = runs[0].summary
    assert summary is not None and (summary["status"], summary["steps"], summary["world_size"]) == ("completed", 12, 2)
    assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"] and summary["energy_j"] > 0
    assert warned[0].removeprefix("wattwise: ").split(" (set strict")[0] in summary["notes"]
    assert runs[1].finished and runs[1].summary is not None  # rank 1 ended the run with the others


def test_a_named_backend_that_opens_on_no_rank_is_said_by_each_as_one_process_would(tmp_path):
    def unopenable(rank: int, gpu: SimulatedGPU | None) -> None:
        if gpu is not None:
            gpu.unopenable = NVML_MISSING  # type: ignore[attr-defined]

    runs, colls, warned = two_ranks(tmp_path, unopenable)
    assert colls[0].issued == colls[1].issued == ["all_gather"]  # the start's question only
    assert [run.measuring for run in runs] == [False, False] and runs[0].summary is None
    assert warned == [f"wattwise: energy measurement failed ({NVML_MISSING}); training goes on without it"] * 2


def test_no_rank_with_anything_to_measure_measures_nothing_as_one_process_would(tmp_path):
    def absent(rank: int, gpu: SimulatedGPU | None) -> None:
        if gpu is not None:
            gpu.absent = True  # type: ignore[attr-defined]

    runs, colls, _ = two_ranks(tmp_path, absent)
    assert colls[0].issued == colls[1].issued == ["all_gather"]  # the start's question only
    assert [run.measuring for run in runs] == [False, False] and runs[0].summary is None


def test_a_limit_lifted_on_one_rank_only_is_said_once_and_in_the_summary(tmp_path):
    lifted = "GPU 1: its power limit is 300 W, not the 200 W this run set: someone else changed it"

    def lift_on_rank_1(rank: int, gpu: SimulatedGPU | None) -> None:
        if rank == 1 and gpu is not None:
            gpu.settings_lifted = lambda: lifted  # type: ignore[method-assign]

    _, reference, _ = two_ranks(tmp_path / "healthy", healthy)
    runs, colls, warned = two_ranks(tmp_path / "lifted", lift_on_rank_1)
    # Said through the exchange the run's end makes anyway: no collective more than a healthy run's.
    assert colls[0].issued == colls[1].issued == reference[0].issued
    assert warned == [f"wattwise: rank 1: {lifted}"]  # once, by the main process
    summary = runs[0].summary
    assert summary is not None and f"rank 1: {lifted}" in summary["notes"]


def test_ranks_whose_energy_counters_differ_tune_by_the_slowest_and_stay_in_step(tmp_path):
    # Rank 0's GPU has an exact counter (the ideal physics), rank 1's changes every 100 ms (the realistic one):
    # alone, rank 0 would end its windows after 2 steps and rank 1 after 20 counter updates, measuring limits
    # again where rank 0 would not. They agree the slowest counter at the start and end every window together.
    runs, colls, _ = two_ranks(
        tmp_path,
        lambda rank, gpu: None,
        steps=160,
        overrides=TUNE[:5],  # 300, 200 and 100 W, 2 profile steps at least
        physics=(Physics.ideal(), Physics.realistic(seed=3)),
    )
    tuners = [run.power.tuner for run in runs]
    assert all(t is not None and t.done for t in tuners)
    assert [t.align_to_counter for t in tuners] == [True, True]  # type: ignore[union-attr]
    assert tuners[0].min_window_s == tuners[1].min_window_s == pytest.approx(20 * 0.100, rel=0.05)  # type: ignore[union-attr]
    assert tuners[0].queue == tuners[1].queue  # type: ignore[union-attr]
    assert colls[0].issued == colls[1].issued
    assert runs[0].power.tuned_limit_w == runs[1].power.tuned_limit_w is not None
