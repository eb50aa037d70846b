"""The run's hot path, framework-neutral: free steps, combining at the logging cadence, pauses, tuning that
cannot finish, resume figures, bounded power samples, and the one-tensor combine over real processes."""

from __future__ import annotations

import json
import threading
import warnings
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.distributed import Collective
from wattwise.monitor import PowerSampler
from wattwise.run import EnergyPluginWarning, Run
from wattwise.tools.workload import emulate_step

BASE_S = 0.1
QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false"]
TUNE = [
    "power_limit.mode=tune",
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
]  # 300, 200, 100 W: 9 steps to finish


class CountingGPU(SimulatedGPU):
    """A simulated GPU that counts how often its energy counter is read."""

    def __init__(self, clock: VirtualClock, physics: Physics | None = None) -> None:
        super().__init__(
            0, PowerModel.default(), base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep, physics=physics
        )
        self.reads = 0

    def energy_j(self) -> float:
        self.reads += 1
        return super().energy_j()


class CountingCollective(Collective):
    """One process, counting the combines and object collectives a run asks for."""

    def __init__(self) -> None:
        self.combines = 0
        self.objects = 0

    def combine(self, windows):  # type: ignore[no-untyped-def]
        self.combines += 1
        return super().combine(windows)

    def all_gather(self, obj: Any) -> list[Any]:
        self.objects += 1
        return super().all_gather(obj)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        self.objects += 1
        return obj


def make_run(
    tmp_path,
    *overrides: str,
    clock: VirtualClock | None = None,
    gpu: SimulatedGPU | None = None,
    collective: Collective | None = None,
    syncs: list[int] | None = None,
) -> tuple[Run, SimulatedGPU]:
    clock = clock or VirtualClock()
    gpu = gpu or CountingGPU(clock)
    cfg = load_config(overrides=[*QUIET, f"output_dir={tmp_path / 'run'}", *overrides])
    sync = (lambda: syncs.append(1)) if syncs is not None else None
    run = Run(cfg, devices=[gpu], collective=collective, wall_clock=clock, sync=sync)
    return run, gpu


def steps(run: Run, gpu: SimulatedGPU, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        out.append(run.step_end())
    return out


def test_a_step_that_neither_logs_nor_decides_reads_nothing_syncs_nothing_combines_nothing(tmp_path):
    syncs: list[int] = []
    coll = CountingCollective()
    run, gpu = make_run(tmp_path, "log_every_n_steps=50", collective=coll, syncs=syncs)
    run.start()
    run.epoch_begin()
    assert isinstance(gpu, CountingGPU)
    before = (gpu.reads, len(syncs), coll.combines)
    records = steps(run, gpu, 49)
    assert (gpu.reads, len(syncs), coll.combines) == before  # 49 free steps
    assert records == [None] * 49
    rec = steps(run, gpu, 1)[0]
    assert rec is not None and rec.steps == 50  # the logging point: one combine for the interval
    assert coll.combines == before[2] + 1 and len(syncs) == before[1] + 1
    busy_w = PowerModel.default().at_limit(300.0)[1]
    assert rec.time_s == pytest.approx(BASE_S) and rec.energy_j == pytest.approx(BASE_S * busy_w)
    steps(run, gpu, 150)
    assert coll.combines == before[2] + 4  # one per logging interval, nothing per step
    run.epoch_end()
    run.finish()
    assert run.summary is not None and run.summary["steps"] == 200


def test_tuning_combines_only_at_the_ends_of_its_windows(tmp_path):
    coll = CountingCollective()
    run, gpu = make_run(tmp_path, *TUNE, "log_every_n_steps=1000", collective=coll)
    run.start()
    run.epoch_begin()
    steps(run, gpu, 9 + 100)
    assert run.power.tuner is not None and run.power.tuner.finished
    assert coll.combines == 3  # one per profiled limit; the 100 steps at the chosen limit are free
    run.finish()


def test_validation_is_paused_out_of_profiles_and_reported_apart(tmp_path):
    clock = VirtualClock()
    run, gpu = make_run(tmp_path, *TUNE, clock=clock)
    run.start()
    run.epoch_begin()
    for i in range(12):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
        if i % 2 == 0:  # validation after every other step, inside the profiles: 10 s at idle power
            run.pause("validation")
            clock.sleep(10.0)
    run.epoch_end()
    run.finish()
    s = run.summary
    assert s is not None
    # Each profiled step's time is the modelled step time at its limit: the 10 s pauses are not in it.
    for entry in s["power_limit"]["profile"]:
        step_s = PowerModel.default().at_limit(entry["power_limit_w"])[0] * BASE_S
        assert entry["time_s"] == pytest.approx(step_s)
    val = s["non_training"]["validation"]
    assert val["count"] == 6 and val["time_s"] == pytest.approx(60.0)
    assert val["energy_j"] == pytest.approx(60.0 * gpu.model.idle_power_w)
    assert s["time_s"] > 60.0  # the fit itself includes validation


def test_a_run_known_too_short_warns_once_and_settles_on_the_best_limit_measured(tmp_path):
    run, gpu = make_run(tmp_path, *TUNE)
    run.expect_steps(7)  # 300 W and 200 W fit (3 steps each); 100 W does not
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        run.epoch_begin()
        seen = []
        for _ in range(7):
            run.step_begin()
            seen.append(gpu.power_limit_w())
            emulate_step([gpu], lambda: None)
            run.step_end()
        run.finish()
    ours = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "may not finish" in ours[0] and "at least 2 of 3 limits" in ours[0]
    s = run.summary
    assert s is not None
    tuning = s["power_limit"]["tuning"]
    assert tuning["finished"] is False and tuning["profiled"] == [300.0, 200.0]
    assert "7 optimizer steps" in tuning["reason"]
    chosen = s["power_limit"]["chosen_power_limit_w"]
    assert chosen in (300.0, 200.0)
    assert seen[-1] == chosen  # the last step ran at the chosen limit, never at the unprofiled 100 W
    assert 100.0 not in seen
    assert any("may not finish" in n for n in s["notes"])


def test_a_run_that_ends_unannounced_reports_unfinished_tuning(tmp_path):
    run, gpu = make_run(tmp_path, *TUNE)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        run.epoch_begin()
        steps(run, gpu, 4)  # 300 W profiled, 200 W warming up
        run.finish()
    ours = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "did not finish" in ours[0]
    s = run.summary
    assert s is not None
    assert s["power_limit"]["tuning"]["finished"] is False
    assert s["power_limit"]["chosen_power_limit_w"] == 300.0  # the only limit measured
    assert s["power_limit"]["energy_saved_j"] is None  # an unfinished profile reports no saving


def test_an_idle_simulated_gpu_never_reports_a_saving(tmp_path):
    run, gpu = make_run(tmp_path, *TUNE)
    run.start()
    run.epoch_begin()
    # Said at the step after tuning ends.
    with pytest.warns(EnergyPluginWarning, match="tuning chose no limit: nothing drove the simulated GPU"):
        for _ in range(20):  # the user's own training code: nothing emulated drives the simulated GPU
            run.step_begin()
            gpu.clock.sleep(BASE_S)  # type: ignore[union-attr]
            run.step_end()
    run.finish()
    s = run.summary
    assert s is not None and s["simulated"] is True
    assert s["power_limit"]["energy_saved_j"] is None and s["power_limit"]["baseline_energy_j"] is None
    assert any("nothing drove the simulated GPU" in n for n in s["notes"])


def test_a_resumed_run_counts_savings_of_both_segments_and_its_epoch_in_progress(tmp_path):
    clock = VirtualClock()
    gpu = CountingGPU(clock)
    first, _ = make_run(tmp_path, *TUNE, clock=clock, gpu=gpu)
    first.start()
    first.epoch_begin(0)
    steps(first, gpu, 9 + 5)  # tuned, then 5 steps at the choice, in the middle of epoch 0
    state = json.loads(json.dumps(first.state_dict()))  # checkpoints hold plain data
    first.finish()
    assert first.summary is not None
    saved_per_step = first.summary["power_limit"]["energy_saved_j"] / 5

    second, _ = make_run(tmp_path, *TUNE, clock=clock, gpu=gpu)
    second.load_state_dict(state)
    second.start()
    steps(second, gpu, 5)  # no epoch start seen: the resumed epoch 0 goes on
    second.epoch_end()
    second.finish()
    s = second.summary
    assert s is not None
    assert s["steps"] == 19 and s["power_limit"]["tuning"]["steps_at_chosen"] == 10
    assert s["power_limit"]["energy_saved_j"] == pytest.approx(10 * saved_per_step)
    assert [e["epoch"] for e in s["epochs"]] == [0]
    # The whole run was epoch 0: its figures include the time before the resume.
    assert s["epochs"][0]["time_s"] == pytest.approx(s["time_s"])
    assert s["epochs"][0]["energy_j"] == pytest.approx(s["energy_j"])
    assert s["resumed_energy_j"] == pytest.approx(first.summary["energy_j"])


def test_nothing_to_measure_means_training_goes_on_unmeasured_with_one_notice(tmp_path):
    cfg = load_config(overrides=[*QUIET, *TUNE, f"output_dir={tmp_path / 'run'}"])
    run = Run(cfg, devices=[], wall_clock=VirtualClock())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        run.step_begin()
        assert run.step_end() is None
        run.finish()
    ours = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(ours) == 1 and "nothing to measure" in ours[0]
    assert run.summary is None and run.power.applied_limit_w is None


def test_the_power_sampler_keeps_a_thinned_trace_in_bounded_memory(tmp_path):
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=BASE_S, clock=clock, sleep=clock.sleep)
    sampler = PowerSampler([gpu], interval_s=0.1, clock=clock, max_samples=1000)
    for _ in range(100_000):  # a week at one sample a minute, say
        clock.sleep(0.1)
        sampler.sample_once()
    kept = sampler.samples()
    assert len(kept) <= 1000 and sampler.kept_every >= 64
    times = [s.timestamp for s in kept]
    assert times == sorted(times) and times[-1] - times[0] > 0.9 * 100_000 * 0.1  # still spans the whole run
    assert sampler.integrated_energy_j(gpu.key) == pytest.approx(100_000 * 0.1 * gpu.model.idle_power_w, rel=1e-3)


@pytest.mark.parametrize(("physics", "reads"), [(Physics.ideal(), 8), (Physics.realistic(seed=1), 6)])
def test_a_one_epoch_fit_reads_each_counter_at_its_start_its_logging_points_and_its_end(tmp_path, physics, reads):
    # 200 steps logging every 50: the fit and its first interval begin from one reading, each logging point
    # reads once, and the epoch's end once. On a counter that changes every 95 ms (as NVML's, whose read
    # takes about 3 ms), the epoch begins from the fit's reading and the fit ends at the epoch's: 6 reads.
    clock = VirtualClock()
    gpu = CountingGPU(clock, physics)
    run, _ = make_run(tmp_path, "log_every_n_steps=50", clock=clock, gpu=gpu)
    run.start()
    run.epoch_begin()
    steps(run, gpu, 200)
    run.epoch_end()
    run.finish()
    assert gpu.reads == reads
    summary = run.summary
    assert summary is not None and summary["steps"] == 200
    assert summary["energy_j"] == pytest.approx(sum(e["energy_j"] for e in summary["epochs"]), rel=0.01)


class ThreadCountingGPU(SimulatedGPU):
    """A simulated GPU on real time that counts its energy counter's reads by the thread that makes them."""

    def __init__(self, physics: Physics) -> None:
        super().__init__(0, PowerModel.default(), base_step_time_s=0.002, physics=physics)
        self.reads: dict[str, int] = {}

    def energy_j(self) -> float:
        name = threading.current_thread().name
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().energy_j()


def test_a_deferred_epoch_end_leaves_the_counter_read_to_another_thread_and_its_exchange_to_the_next(tmp_path):
    # 4 epochs of 8 steps, no logging point: on a counter that changes every 95 ms and takes about 3 ms to
    # read (NVML's on an H100), the training thread reads it at the fit's start and end only; each epoch's
    # end is read by the reader thread, and the epochs are combined in one exchange at the fit's end.
    gpu = ThreadCountingGPU(Physics.realistic(seed=1))
    coll = CountingCollective()
    run, _ = make_run(tmp_path, "log_every_n_steps=1000", gpu=gpu, collective=coll, clock=None)
    run.start()
    combines = coll.combines
    ended = []
    for epoch in range(4):
        run.epoch_begin(epoch)
        for _ in range(8):
            run.step_begin()
            gpu.run_step()
            run.step_end()
        assert run.epoch_end(defer=True) is None
        ended += run.take_ended_epochs()
    assert ended == [] and coll.combines == combines  # no exchange, no wait for a reading
    run.finish()
    training = threading.current_thread().name
    assert gpu.reads.get(training, 0) <= 2  # was 5: the fit's start, each epoch's end and the fit's end
    assert sum(n for name, n in gpu.reads.items() if name != training) == 4
    assert coll.combines == combines + 1
    ended = run.take_ended_epochs()
    assert [e.epoch for e in ended] == [0, 1, 2, 3] and all(e.figures.steps == 8 for e in ended)
    summary = run.summary
    assert summary is not None and [e["epoch"] for e in summary["epochs"]] == [0, 1, 2, 3]
    # The epochs tile the fit: one reading ends each and begins the next.
    epochs_j = sum(e["energy_j"] for e in summary["epochs"])
    assert abs(summary["energy_j"] - epochs_j) <= summary["energy_uncertainty_j"]
