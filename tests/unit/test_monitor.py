"""Measurement windows: nested, overlapping, cancelled; the CSV log; counters that do not tick; sampling.

Simulated GPUs run on one virtual clock, which the monitor picks up, so every time and energy is exact:
idle 50 W, busy 240 W at the maximum limit (the hand model below).
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_pynvml import FakeClock
from wattwise.devices.base import Device, DeviceError
from wattwise.devices.simulated import PowerModel, SimulatedGPU
from wattwise.errors import InternalError, UsageError
from wattwise.monitor import EnergyMonitor, PowerSampler
from wattwise.record.files import WindowsLog, power_rows, write_power_csv

IDLE_W = 50.0
BUSY_W = 240.0
HAND = PowerModel(
    power_limits_w=(100.0, 200.0, 300.0),
    time_factors=(2.0, 1.2, 1.0),
    busy_power_w=(90.0, 170.0, BUSY_W),
    idle_power_w=IDLE_W,
)


pytestmark = pytest.mark.usefixtures("simulated_home")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gpu(clock: FakeClock) -> SimulatedGPU:
    return SimulatedGPU(0, HAND, clock=clock, sleep=clock.advance)


@pytest.fixture
def monitor(gpu: SimulatedGPU) -> EnergyMonitor:
    return EnergyMonitor([gpu])


class FakeDevice(Device):
    """A non-simulated device with a settable power and a counter that only moves when told to."""

    backend = "fake"

    def __init__(self, index: int = 0, *, power_w: float = 100.0, counter: bool = True, period_s: float = 0.0) -> None:
        self._index = index
        self.power = power_w
        self.counter = counter
        self.energy = 0.0
        self.lost = False
        self.period_s = period_s
        self.wrap_s: float | None = None
        self.reads = 0

    @property
    def energy_update_period_s(self) -> float:
        return self.period_s

    @property
    def max_read_interval_s(self) -> float | None:
        return self.wrap_s

    @property
    def index(self) -> int:
        return self._index

    @property
    def name(self) -> str:
        return "fake"

    def has_energy_counter(self) -> bool:
        return self.counter

    def energy_j(self) -> float:
        self.reads += 1
        return self.energy

    def power_w(self) -> float:
        if self.lost:
            raise DeviceError("fake device lost")
        return self.power

    def spec(self) -> dict[str, Any]:
        return {"backend": "fake", "index": self._index}


def busy_for(gpu: SimulatedGPU, clock: FakeClock, seconds: float) -> None:
    with gpu.busy():
        clock.advance(seconds)


# -- windows ------------------------------------------------------------------------------------------


def test_a_window_measures_time_and_energy_on_the_devices_clock(
    monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock
) -> None:
    monitor.begin_window("step")
    clock.advance(1.0)
    busy_for(gpu, clock, 2.0)
    m = monitor.end_window("step")
    assert m.name == "step"
    assert m.time_s == pytest.approx(3.0)
    assert m.energy_j == {"gpu0": pytest.approx(IDLE_W * 1.0 + BUSY_W * 2.0)}
    assert m.total_energy_j == pytest.approx(IDLE_W + 2 * BUSY_W)
    assert m.avg_power_w == pytest.approx((IDLE_W + 2 * BUSY_W) / 3.0)
    assert m.approximate == ()
    assert m.simulated is True


def test_nested_windows_each_measure_their_own_span(
    monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock
) -> None:
    monitor.begin_window("epoch")
    clock.advance(1.0)
    monitor.begin_window("step")
    busy_for(gpu, clock, 2.0)
    step = monitor.end_window("step")
    clock.advance(0.5)
    epoch = monitor.end_window("epoch")
    assert (step.time_s, step.energy_j["gpu0"]) == (pytest.approx(2.0), pytest.approx(2 * BUSY_W))
    assert epoch.time_s == pytest.approx(3.5)
    assert epoch.energy_j["gpu0"] == pytest.approx(1.5 * IDLE_W + 2 * BUSY_W)


def test_overlapping_windows_each_measure_their_own_span(
    monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock
) -> None:
    monitor.begin_window("a")
    busy_for(gpu, clock, 1.0)
    monitor.begin_window("b")
    clock.advance(2.0)
    a = monitor.end_window("a")
    busy_for(gpu, clock, 3.0)
    b = monitor.end_window("b")
    assert (a.time_s, a.energy_j["gpu0"]) == (pytest.approx(3.0), pytest.approx(BUSY_W + 2 * IDLE_W))
    assert (b.time_s, b.energy_j["gpu0"]) == (pytest.approx(5.0), pytest.approx(2 * IDLE_W + 3 * BUSY_W))


def test_a_cancelled_window_is_closed_and_cannot_be_ended(monitor: EnergyMonitor, clock: FakeClock) -> None:
    monitor.begin_window("step")
    monitor.cancel_window("step")
    assert not monitor.is_open("step")
    with pytest.raises(InternalError, match="not open"):
        monitor.end_window("step")
    monitor.begin_window("step")  # the name is free again
    clock.advance(1.0)
    assert monitor.end_window("step").time_s == pytest.approx(1.0)


def test_opening_a_window_twice_is_an_error_and_keeps_the_first(monitor: EnergyMonitor, clock: FakeClock) -> None:
    monitor.begin_window("step")
    clock.advance(1.0)
    with pytest.raises(InternalError, match="'step' is already open"):
        monitor.begin_window("step")
    clock.advance(1.0)
    assert monitor.end_window("step").time_s == pytest.approx(2.0)


def test_ending_a_window_never_opened_is_an_error(monitor: EnergyMonitor) -> None:
    with pytest.raises(InternalError, match="'eval' is not open"):
        monitor.end_window("eval")


def test_cancelling_a_window_never_opened_is_an_error(monitor: EnergyMonitor) -> None:
    with pytest.raises(InternalError, match="'eval' is not open"):
        monitor.cancel_window("eval")


def test_ending_a_window_twice_is_an_error(monitor: EnergyMonitor) -> None:
    monitor.begin_window("step")
    monitor.end_window("step")
    with pytest.raises(InternalError):
        monitor.end_window("step")


def test_peek_reports_so_far_and_leaves_the_window_open(
    monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock
) -> None:
    monitor.begin_window("fit")
    busy_for(gpu, clock, 1.0)
    peek = monitor.peek_window("fit")
    assert (peek.time_s, peek.energy_j["gpu0"]) == (pytest.approx(1.0), pytest.approx(BUSY_W))
    assert monitor.is_open("fit")
    clock.advance(2.0)
    final = monitor.end_window("fit")
    assert (final.time_s, final.energy_j["gpu0"]) == (pytest.approx(3.0), pytest.approx(BUSY_W + 2 * IDLE_W))


def test_peeking_a_window_never_opened_is_an_error(monitor: EnergyMonitor) -> None:
    with pytest.raises(InternalError, match="not open"):
        monitor.peek_window("fit")


def test_window_context_manager_sets_the_measurement(
    monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock
) -> None:
    with monitor.window("eval") as w:
        assert monitor.is_open("eval")
        busy_for(gpu, clock, 0.5)
    assert not monitor.is_open("eval")
    assert w.measurement is not None
    assert w.measurement.energy_j["gpu0"] == pytest.approx(0.5 * BUSY_W)


def test_window_context_manager_cancels_on_exception(monitor: EnergyMonitor, clock: FakeClock) -> None:
    with pytest.raises(RuntimeError, match="boom"), monitor.window("eval") as w:
        clock.advance(1.0)
        raise RuntimeError("boom")
    assert not monitor.is_open("eval")
    assert w.measurement is None


def test_window_as_decorator_measures_each_call(monitor: EnergyMonitor, gpu: SimulatedGPU, clock: FakeClock) -> None:
    handle = monitor.window("infer")

    @handle
    def infer(seconds: float) -> str:
        busy_for(gpu, clock, seconds)
        return "done"

    assert infer(1.0) == "done"
    assert handle.measurement is not None
    assert handle.measurement.energy_j["gpu0"] == pytest.approx(BUSY_W)
    assert infer(2.0) == "done"  # a second call opens the window again
    assert handle.measurement.energy_j["gpu0"] == pytest.approx(2 * BUSY_W)
    assert infer.__name__ == "infer"


def test_sync_runs_before_reading_counters(gpu: SimulatedGPU) -> None:
    calls: list[str] = []
    monitor = EnergyMonitor([gpu], sync=lambda: calls.append("sync"))
    monitor.begin_window("a")
    monitor.end_window("a")
    monitor.begin_window("b", sync=False)
    monitor.end_window("b", sync=False)
    assert calls == ["sync", "sync"]


def test_several_devices_are_measured_separately_and_summed(clock: FakeClock) -> None:
    gpus = [SimulatedGPU(i, HAND, clock=clock, sleep=clock.advance) for i in range(3)]
    monitor = EnergyMonitor(gpus)
    monitor.begin_window("step")
    busy_for(gpus[1], clock, 2.0)
    m = monitor.end_window("step")
    assert m.energy_j == {
        "gpu0": pytest.approx(2 * IDLE_W),
        "gpu1": pytest.approx(2 * BUSY_W),
        "gpu2": pytest.approx(2 * IDLE_W),
    }
    assert m.total_energy_j == pytest.approx(4 * IDLE_W + 2 * BUSY_W)


def test_a_monitor_needs_devices_with_distinct_keys(gpu: SimulatedGPU) -> None:
    with pytest.raises(UsageError, match="at least one device"):
        EnergyMonitor([])
    with pytest.raises(UsageError, match="same key"):
        EnergyMonitor([gpu, SimulatedGPU(0, HAND)])


# -- CSV log ------------------------------------------------------------------------------------------


def test_the_log_has_a_header_and_one_row_per_ended_window(tmp_path: Path, clock: FakeClock) -> None:
    gpus = [SimulatedGPU(i, HAND, clock=clock, sleep=clock.advance) for i in range(2)]
    log = tmp_path / "logs" / "windows.csv"
    monitor = EnergyMonitor(gpus, sink=WindowsLog(log, [g.key for g in gpus]), wall_clock=lambda: 1_700_000_000.0)
    monitor.begin_window("a")
    busy_for(gpus[0], clock, 1.0)
    monitor.end_window("a")
    monitor.begin_window("cancelled")
    clock.advance(1.0)
    monitor.cancel_window("cancelled")
    with pytest.raises(ValueError), monitor.window("raised"):
        raise ValueError
    monitor.begin_window("b")
    clock.advance(2.0)
    monitor.end_window("b")

    with open(log, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == [
        "start_time",
        "window_name",
        "time_s",
        "energy_j",
        "gpu0_energy_j",
        "gpu1_energy_j",
        "approximate",
        "simulated",
        "energy_uncertainty_j",
        "kind",
    ]
    body = [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    assert [r["window_name"] for r in body] == ["a", "b"]
    a, b = body
    assert float(a["start_time"]) == 1_700_000_000.0
    assert float(a["time_s"]) == pytest.approx(1.0)
    assert float(a["gpu0_energy_j"]) == pytest.approx(BUSY_W)
    assert float(a["gpu1_energy_j"]) == pytest.approx(IDLE_W)
    assert float(a["energy_j"]) == pytest.approx(BUSY_W + IDLE_W)
    assert float(b["energy_j"]) == pytest.approx(4 * IDLE_W)
    assert a["approximate"] == "" and a["simulated"] == "true" and a["kind"] == ""  # a kind is a pause's


def test_a_new_monitor_starts_a_fresh_log(tmp_path: Path, gpu: SimulatedGPU) -> None:
    log = tmp_path / "windows.csv"
    first = EnergyMonitor([gpu], sink=WindowsLog(log, [gpu.key]))
    first.begin_window("old")
    first.end_window("old")
    EnergyMonitor([gpu], sink=WindowsLog(log, [gpu.key]))
    with open(log, newline="") as fh:
        assert len(list(csv.reader(fh))) == 1


# -- counters that do not tick ------------------------------------------------------------------------


def test_a_counter_that_does_not_tick_is_approximated_by_power_times_time(
    gpu: SimulatedGPU, clock: FakeClock, tmp_path: Path
) -> None:
    stuck = FakeDevice(1, power_w=80.0)
    log = tmp_path / "w.csv"
    monitor = EnergyMonitor([gpu, stuck], clock=clock, sink=WindowsLog(log, [gpu.key, stuck.key]))
    monitor.begin_window("short")
    clock.advance(0.25)
    m = monitor.end_window("short")
    assert m.energy_j["gpu1"] == pytest.approx(80.0 * 0.25)
    assert m.energy_j["gpu0"] == pytest.approx(IDLE_W * 0.25)
    assert m.approximate == ("gpu1",)
    with open(log, newline="") as fh:
        (row,) = csv.DictReader(fh)
    assert row["approximate"] == "gpu1"


def test_a_counter_that_ticks_is_not_approximated(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=80.0)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("w")
    clock.advance(0.25)
    dev.energy += 30.0
    m = monitor.end_window("w")
    assert m.energy_j == {"gpu0": 30.0}
    assert m.approximate == ()
    assert m.simulated is False


def test_a_window_of_no_time_is_zero_and_not_approximated(clock: FakeClock) -> None:
    monitor = EnergyMonitor([FakeDevice(power_w=80.0)], clock=clock)
    monitor.begin_window("w")
    m = monitor.end_window("w")
    assert (m.time_s, m.energy_j["gpu0"], m.approximate) == (0.0, 0.0, ())


def test_an_unreadable_power_during_the_approximation_gives_zero_not_a_crash(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=80.0)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("w")
    clock.advance(1.0)
    dev.lost = True
    m = monitor.end_window("w")
    assert m.energy_j["gpu0"] == 0.0
    assert m.approximate == ("gpu0",)


def test_a_window_closed_and_reopened_at_once_reads_each_counter_once(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("steps")
    clock.advance(1.0)
    dev.energy += 100.0
    reads = dev.reads
    (first,) = monitor.end_windows(["steps"], reopen=["steps"])
    assert dev.reads == reads + 1  # a logging point: one read ends one interval and begins the next
    clock.advance(2.0)
    dev.energy += 200.0
    second = monitor.end_window("steps")
    assert (first.time_s, first.energy_j["gpu0"]) == (1.0, 100.0)
    assert (second.time_s, second.energy_j["gpu0"]) == (2.0, 200.0)


def test_windows_begun_together_read_each_counter_once(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_windows(["fit", "steps"])
    assert dev.reads == 1
    clock.advance(1.0)
    dev.energy += 100.0
    fit, steps = monitor.end_windows(["fit", "steps"])
    assert (fit.time_s, fit.energy_j) == (steps.time_s, steps.energy_j) == (1.0, {"gpu0": 100.0})


def test_a_recent_reading_serves_a_window_that_begins_where_nothing_ran_only_on_a_coarse_counter(
    clock: FakeClock,
) -> None:
    # An NVML-like counter that changes every 0.1 s: a reading under 10 ms old is taken again, with its time.
    coarse = FakeDevice(power_w=100.0, period_s=0.1)
    monitor = EnergyMonitor([coarse], clock=clock)
    assert monitor.reuse_within_s == pytest.approx(0.01)
    monitor.begin_window("fit")
    clock.advance(0.004)
    monitor.begin_window("epoch", recent=True)
    assert coarse.reads == 1
    clock.advance(0.011)  # older than a tenth of the period: read again
    monitor.begin_window("later", recent=True)
    assert coarse.reads == 2
    clock.advance(1.0)
    coarse.energy += 101.5
    epoch, fit = monitor.end_windows(["epoch", "fit"])
    assert epoch.time_s == fit.time_s == pytest.approx(1.015)  # both from the same reading
    assert epoch.energy_j == fit.energy_j
    # A window that does not ask for it reads again, however recent the last reading.
    monitor.begin_window("fresh")
    assert coarse.reads == 4
    # A counter that changes continuously (the ideal simulated GPU) is always read.
    exact = FakeDevice(power_w=100.0, period_s=0.0)
    ideal = EnergyMonitor([exact], clock=clock)
    ideal.begin_window("fit")
    ideal.begin_window("epoch", recent=True)
    assert ideal.reuse_within_s == 0.0 and exact.reads == 2


# -- how precisely a window is measured ---------------------------------------------------------------


def test_a_window_carries_one_counter_update_of_energy_at_each_end(clock: FakeClock, tmp_path: Path) -> None:
    dev = FakeDevice(power_w=100.0, period_s=0.1)
    log = tmp_path / "windows.csv"
    monitor = EnergyMonitor([dev], clock=clock, sink=WindowsLog(log, [dev.key]))
    monitor.begin_window("w")
    clock.advance(10.0)
    dev.energy += 1000.0  # 100 W for 10 s
    m = monitor.end_window("w")
    monitor.close()
    # Each end off by up to 100 W x 0.1 s = 10 J; the two ends in quadrature.
    assert m.energy_uncertainty_j == {"gpu0": pytest.approx(10.0 * 2**0.5)}
    with open(log, newline="") as fh:
        (row,) = csv.DictReader(fh)
    assert float(row["energy_uncertainty_j"]) == pytest.approx(10.0 * 2**0.5, abs=1e-6)


def test_a_window_shorter_than_a_counter_update_is_no_more_precise_than_one_update(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0, period_s=0.1)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("fit")
    clock.advance(10.0)
    dev.energy += 1000.0
    monitor.begin_window("short")
    clock.advance(0.01)  # the counter does not move: 1 J approximated from power x time
    short = monitor.end_window("short")
    assert short.approximate == ("gpu0",) and short.energy_j["gpu0"] == pytest.approx(1.0)
    assert short.total_energy_uncertainty_j >= 100.0 * 0.1  # at least one update of the counter


def test_an_exact_counter_has_no_uncertainty_and_devices_add_in_quadrature(clock: FakeClock) -> None:
    exact, coarse = FakeDevice(0, power_w=100.0), FakeDevice(1, power_w=300.0, period_s=0.1)
    monitor = EnergyMonitor([exact, coarse], clock=clock)
    monitor.begin_window("w")
    clock.advance(1.0)
    exact.energy += 100.0
    coarse.energy += 300.0
    m = monitor.end_window("w")
    assert m.energy_uncertainty_j["gpu0"] == 0.0
    assert m.total_energy_uncertainty_j == pytest.approx(30.0 * 2**0.5)


def test_each_segment_of_a_paused_window_adds_its_two_ends(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0, period_s=0.1)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("w")
    clock.advance(1.0)
    dev.energy += 100.0
    monitor.pause_windows(["w"])
    clock.advance(1.0)
    dev.energy += 100.0
    monitor.resume_windows(["w"])
    clock.advance(1.0)
    dev.energy += 100.0
    m = monitor.end_window("w")
    assert m.energy_j["gpu0"] == pytest.approx(200.0)
    assert m.total_energy_uncertainty_j == pytest.approx(10.0 * 4**0.5)


def test_an_open_window_peeked_says_its_uncertainty_so_far(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0, period_s=0.1)
    monitor = EnergyMonitor([dev], clock=clock)
    monitor.begin_window("w")
    clock.advance(2.0)
    dev.energy += 200.0
    assert monitor.peek_window("w").total_energy_uncertainty_j == pytest.approx(10.0 * 2**0.5)


def test_the_sampler_bounds_its_trapezoid_error_by_the_power_change_between_samples(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0, counter=False)
    sampler = PowerSampler([dev], interval_s=1.0, clock=clock)
    sampler.sample_once()
    clock.advance(1.0)
    sampler.sample_once()  # constant power: no error between the samples
    assert sampler.error_bound_j("gpu0") == 0.0
    dev.power = 200.0
    clock.advance(2.0)
    sampler.sample_once()  # 100 W -> 200 W over 2 s: the trapezoid is off by at most 100 W x 2 s / 2
    assert sampler.error_bound_j("gpu0") == pytest.approx(100.0)


# -- power sampling -----------------------------------------------------------------------------------


def test_the_sampler_integrates_power_with_trapezoids(clock: FakeClock) -> None:
    dev = FakeDevice(power_w=100.0, counter=False)
    sampler = PowerSampler([dev], interval_s=1.0, clock=clock)
    sampler.sample_once()  # t=0: 100 W
    clock.advance(1.0)
    sampler.sample_once()  # t=1: 100 W   -> 100 J
    dev.power = 200.0
    clock.advance(2.0)
    sampler.sample_once()  # t=3: 200 W   -> (100 + 200) / 2 * 2 = 300 J
    assert sampler.integrated_energy_j("gpu0") == pytest.approx(400.0)
    clock.advance(0.5)  # no sample yet: the last power carries on
    assert sampler.integrated_energy_j("gpu0") == pytest.approx(400.0 + 200.0 * 0.5)
    assert [s.power_w["gpu0"] for s in sampler.samples()] == [100.0, 100.0, 200.0]


def test_the_sampler_skips_a_device_that_fails_and_writes_its_samples(clock: FakeClock, tmp_path: Path) -> None:
    ok, flaky = FakeDevice(0, power_w=100.0, counter=False), FakeDevice(1, power_w=50.0, counter=False)
    sampler = PowerSampler([ok, flaky], clock=clock)
    sampler.sample_once()
    flaky.lost = True
    clock.advance(1.0)
    sampler.sample_once()
    assert sampler.samples()[-1].power_w == {"gpu0": 100.0}
    assert sampler.integrated_energy_j("gpu0") == pytest.approx(100.0)
    out = tmp_path / "power.csv"
    write_power_csv(out, power_rows((s.timestamp, s.power_w) for s in sampler.samples()))
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["device"], float(r["power_w"])) for r in rows] == [("gpu0", 100.0), ("gpu1", 50.0), ("gpu0", 100.0)]
    assert float(rows[0]["timestamp"]) == pytest.approx(1000.0)


def test_the_sampler_reads_only_the_counters_that_wrap(clock: FakeClock) -> None:
    steady, wrapping = FakeDevice(0), FakeDevice(1)
    wrapping.wrap_s = 60.0
    sampler = PowerSampler([steady, wrapping], interval_s=1.0, clock=clock)
    for _ in range(3):
        sampler.sample_once()
    # A read costs the training process time (ms on a real GPU): only a counter that may wrap needs it.
    assert (steady.reads, wrapping.reads) == (0, 3)
    assert [s.power_w for s in sampler.samples()] == [{"gpu0": 100.0, "gpu1": 100.0}] * 3


def test_a_sampling_interval_must_be_positive() -> None:
    with pytest.raises(UsageError, match="sample_interval_s"):
        PowerSampler([FakeDevice(counter=False)], interval_s=0.0)


def test_a_device_without_counter_is_measured_by_the_background_sampler() -> None:
    dev = FakeDevice(power_w=120.0, counter=False)
    with EnergyMonitor([dev], sample_interval_s=0.02) as monitor:
        assert monitor.sampler is not None
        monitor.begin_window("w")
        time.sleep(0.3)
        m = monitor.end_window("w")
    # Constant power: whatever the sampling, the integral is power x time (clocks read microseconds apart).
    assert m.energy_j["gpu0"] == pytest.approx(120.0 * m.time_s, rel=0.05)
    assert m.approximate == ()
    assert len(monitor.sampler.samples()) >= 2


def test_a_window_aligned_on_changes_of_the_counter_is_known_to_a_step_not_to_a_period() -> None:
    from wattwise.monitor import counter_window_uncertainty_j

    # 400 J over 2 s (200 W) in 40 steps of 50 ms, on a counter that changes every 100 ms.
    anywhere = counter_window_uncertainty_j(400.0, 2.0, 0.1)
    aligned = counter_window_uncertainty_j(400.0, 2.0, 0.1, aligned_steps=40)
    assert anywhere == pytest.approx(2 * 200 * 0.1 / math.sqrt(6))
    assert aligned == pytest.approx(anywhere / 2)  # each end within a 50 ms step, not a 100 ms period
    assert counter_window_uncertainty_j(400.0, 2.0, 0.1, aligned_steps=5) == pytest.approx(anywhere)  # long steps
    assert counter_window_uncertainty_j(400.0, 2.0, 0.0, aligned_steps=40) == 0.0  # an exact counter
