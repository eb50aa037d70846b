"""The simulated GPU's realistic physics: what a user of a real GPU would see, on a virtual clock.

A counter that changes 10 times a second, reads that take time, settings that settle (a power limit closed
loop, a clock open loop), noise that a seed fixes, GPUs that differ in time under a binding cap and never
draw more than their limit, an averaged power reading, presets per GPU generation, an optional temperature;
and the ideal physics, exact, where named.
"""

from __future__ import annotations

import itertools
import re
import statistics
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import discover, simulated_gpus
from wattwise.devices.simulated import Physics, PhysicsName, PowerModel, SimulatedGPU
from wattwise.errors import ConfigError, UsageError

MODEL = PowerModel.default()


def realistic_gpu(clock: VirtualClock, seed: int = 1, index: int = 0, **kwargs: object) -> SimulatedGPU:
    return SimulatedGPU(index, MODEL, clock=clock, sleep=clock.sleep, physics=Physics.realistic(seed), **kwargs)


def busy_for(gpu: SimulatedGPU, clock: VirtualClock, seconds: float) -> None:
    with gpu.busy():
        clock.sleep(seconds)


def test_the_energy_counter_changes_10_times_a_second_as_on_the_h100() -> None:
    clock = VirtualClock()
    gpu = realistic_gpu(clock)
    values = []
    with gpu.busy():
        start = clock()
        while clock() - start < 10.0:
            values.append(gpu.energy_j())
            clock.sleep(0.005)
    changes = sum(1 for a, b in itertools.pairwise(values) if b != a)
    assert 97 <= changes <= 103  # 10 per second over 10 s: the H100's 20 changes in 2 s
    assert gpu.energy_update_period_s == pytest.approx(0.100)


def test_a_short_window_is_quantised_by_the_counter_and_a_long_one_is_not() -> None:
    clock = VirtualClock()
    gpu = realistic_gpu(clock)
    busy_w = MODEL.busy_power_w[-1]
    with gpu.busy():
        e0 = gpu.energy_j()
        t0 = clock()
        clock.sleep(0.03)
        short = gpu.energy_j() - e0
        clock.sleep(3.0)
        long_j = gpu.energy_j() - e0
        long_s = clock() - t0
    assert short in (0.0,) or short > 0.05 * busy_w  # nothing, or a whole update's energy (~100 ms of it)
    assert long_j == pytest.approx(busy_w * long_s, rel=0.08)


def test_an_energy_read_takes_2_8_ms_at_the_median_and_5_7_ms_at_the_90th_percentile() -> None:
    clock = VirtualClock()
    gpu = realistic_gpu(clock)
    took = []
    for _ in range(2000):
        before = clock()
        gpu.energy_j()
        took.append(clock() - before)
    took.sort()
    assert statistics.median(took) == pytest.approx(0.00281, rel=0.1)
    assert took[int(0.9 * len(took))] == pytest.approx(0.00574, rel=0.15)


def test_a_new_power_limit_reaches_its_effect_over_a_short_settling_time() -> None:
    clock = VirtualClock()
    gpu = realistic_gpu(clock)
    before_w = gpu.busy_power_w()
    gpu.set_power_limit_w(150)
    just_after = gpu.busy_power_w()
    clock.sleep(1.0)
    settled = gpu.busy_power_w()
    assert just_after == pytest.approx(before_w)  # not at once
    fresh = realistic_gpu(clock)
    fresh.set_power_limit_w(150)
    clock.sleep(1.0)
    assert abs(settled - fresh.busy_power_w()) < 0.01
    assert gpu.power_limit_w() == 150  # the setting itself reads back at once, as NVML's does


def test_step_times_vary_by_a_few_per_cent_and_a_seed_repeats_them() -> None:
    clock = VirtualClock()
    first = [realistic_gpu(clock, seed=7).step_time_s() for _ in range(1)]
    gpu = realistic_gpu(clock, seed=7)
    times = [gpu.step_time_s() for _ in range(500)]
    again = realistic_gpu(clock, seed=7)
    assert [again.step_time_s() for _ in range(500)] == times
    assert first[0] == times[0]
    spread = statistics.stdev(times) / statistics.mean(times)
    assert 0.01 < spread < 0.04
    other = realistic_gpu(clock, seed=8)
    assert [other.step_time_s() for _ in range(5)] != times[:5]


def test_without_a_seed_each_run_differs() -> None:
    clock = VirtualClock()
    a = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.sleep, physics=Physics.realistic())
    b = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.sleep, physics=Physics.realistic())
    assert [a.step_time_s() for _ in range(5)] != [b.step_time_s() for _ in range(5)]


def test_gpus_of_one_node_differ_in_efficiency_by_a_few_per_cent() -> None:
    clock = VirtualClock()
    gpus = [realistic_gpu(clock, seed=3, index=i) for i in range(8)]
    efficiencies = [g.efficiency for g in gpus]
    assert len(set(efficiencies)) == 8
    assert all(0.89 <= e <= 1.11 for e in efficiencies)
    assert realistic_gpu(clock, seed=9, index=5).efficiency == efficiencies[5]  # the GPU's, whatever the seed


def test_power_reading_is_an_average_over_the_last_second() -> None:
    clock = VirtualClock()
    gpu = realistic_gpu(clock)
    clock.sleep(2.0)
    idle_w = MODEL.idle_power_w
    with gpu.busy():
        clock.sleep(0.25)
        early = gpu.power_w()
        clock.sleep(1.5)
        late = gpu.power_w()
    busy_w = min(idle_w + (MODEL.busy_power_w[-1] - idle_w) * gpu.efficiency, MODEL.limit_range_w[1])
    assert early == pytest.approx(idle_w + 0.25 * (busy_w - idle_w), rel=0.05)  # three quarters idle
    assert late == pytest.approx(busy_w, rel=0.05)


def test_the_ideal_physics_is_exact_and_free() -> None:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, MODEL, clock=clock, sleep=clock.sleep, physics=Physics.ideal())
    with gpu.busy():
        e0, t0 = gpu.energy_j(), clock()
        clock.sleep(0.013)
        assert gpu.energy_j() - e0 == pytest.approx(MODEL.busy_power_w[-1] * 0.013, rel=1e-9)
        assert clock() - t0 == pytest.approx(0.013, rel=1e-9)  # the reads took no time
    assert gpu.energy_update_period_s == 0.0 and gpu.step_time_s() == gpu.base_step_time_s


def test_the_physics_comes_from_the_environment_realistic_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATTWISE_SIMULATED_PHYSICS")
    assert Physics.named().name == PhysicsName.REALISTIC
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "ideal")
    assert Physics.named() == Physics.ideal()
    assert Physics.named("realistic").name == PhysicsName.REALISTIC  # the configuration's value wins
    monkeypatch.setenv("WATTWISE_SIMULATED_SEED", "42")
    assert Physics.named("realistic").seed == 42


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("WATTWISE_SIMULATED_PHYSICS", "exact", "WATTWISE_SIMULATED_PHYSICS must be one of realistic, ideal"),
        ("WATTWISE_SIMULATED_SEED", "one", "WATTWISE_SIMULATED_SEED must be an integer (got 'one')"),
    ],
)
def test_a_bad_physics_variable_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "realistic")
    monkeypatch.setenv(variable, value)
    with pytest.raises(UsageError, match=re.escape(message)):
        Physics.named()


def test_the_configuration_key_chooses_the_physics_of_discovered_gpus(tmp_path: Path) -> None:
    found = discover("simulated", persist_dir=tmp_path, simulated_physics="realistic")
    (gpu,) = found.gpus
    assert gpu.describe()["physics"] == "realistic"
    (ideal,) = simulated_gpus(1, persist_dir=tmp_path)  # the unit tier's environment: ideal
    assert ideal.describe()["physics"] == "ideal" and ideal.describe()["energy_update_period_s"] == 0.0
    with pytest.raises(ConfigError, match=r"devices\.simulated_physics must be one of realistic, ideal"):
        load_config(overrides=["devices.simulated_physics=exact"])


def test_a_reopened_simulated_gpu_keeps_its_physics(tmp_path: Path) -> None:
    from wattwise.devices import open_spec

    (gpu,) = simulated_gpus(1, persist_dir=tmp_path, physics="realistic")
    assert gpu.spec()["physics"] == "realistic"
    assert open_spec(gpu.spec()).describe()["physics"] == "realistic"
