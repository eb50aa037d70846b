"""The realistic simulated GPU calibrated against measured hardware, per GPU generation.

What a user comparing it with a real GPU would check: the clock curve's cheapest clock lies above the lowest
clock, as the measured profiles say; no GPU draws more than its power limit once settled; GPUs differ in time
under a binding cap; a locked clock settles faster than a power limit; each preset's counter, power reading
and read cost, chosen by the configuration key or the environment and shown by `wattwise devices --json`;
and a temperature that, when on, makes a warm GPU need more energy per step.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.cli.main import main as wattwise_main
from wattwise.config import load_config
from wattwise.devices import discover
from wattwise.devices.simulated import Physics, PowerModel, SimulatedGPU
from wattwise.devices.simulated.presets import PRESETS
from wattwise.errors import ConfigError, UsageError
from wattwise.vocabulary import SimulatedGpuName

MODEL = PowerModel.default()
GPUS = list(SimulatedGpuName)


def gpu_of(name: SimulatedGpuName, clock: VirtualClock, index: int = 0, *, temperature: bool = False) -> SimulatedGPU:
    """A realistic GPU of that generation without step-to-step noise (its settled figures are exact)."""
    physics = dataclasses.replace(
        Physics.realistic(1, name, temperature=temperature), step_time_noise=0.0, power_noise=0.0
    )
    return SimulatedGPU(index, MODEL, clock=clock, sleep=clock.sleep, physics=physics)


def settled(gpu: SimulatedGPU) -> tuple[float, float]:
    """(step time relative to the model's at the maximum limit, busy power W) at the current settings."""
    return gpu.step_time_s(1.0), gpu.busy_power_w()


def energy_per_step_j(gpu: SimulatedGPU, mhz: int) -> float:
    """Settled energy of one step at a locked clock, without noise: busy power times step time."""
    clocks = gpu.model.clock
    idle, top = gpu.model.idle_power_w, gpu.model.busy_power_w[-1]
    power = idle + (top - idle) * clocks.power_factor(mhz)
    return power * clocks.time_factor(mhz)


@pytest.mark.parametrize("name", GPUS)
def test_the_cheapest_clock_per_step_is_above_the_lowest_one(name: SimulatedGpuName) -> None:
    gpu = gpu_of(name, VirtualClock())
    clocks = gpu.supported_sm_clocks_mhz()
    energies = {mhz: energy_per_step_j(gpu, mhz) for mhz in clocks}
    cheapest = min(energies, key=energies.__getitem__)
    lowest, highest = min(clocks), max(clocks)
    assert lowest < cheapest < highest
    assert energies[lowest] > 1.2 * energies[cheapest]  # the H100 measured its lowest clock 27% dearer


def test_the_h100s_lowest_clock_costs_more_per_step_than_its_middle_one_as_measured() -> None:
    gpu = gpu_of(SimulatedGpuName.H100, VirtualClock())
    assert gpu.supported_sm_clocks_mhz()[0] == 1980 and gpu.supported_sm_clocks_mhz()[-1] == 345
    assert len(gpu.supported_sm_clocks_mhz()) == 110  # as the H100 report lists them
    assert energy_per_step_j(gpu, 345) > energy_per_step_j(gpu, 1155) * 1.27


def test_the_a100s_cheapest_clock_is_where_the_perseus_profile_puts_it() -> None:
    gpu = gpu_of(SimulatedGpuName.A100, VirtualClock())
    energies = {mhz: energy_per_step_j(gpu, mhz) for mhz in gpu.supported_sm_clocks_mhz()}
    cheapest = min(energies, key=energies.__getitem__)
    assert 1000 <= cheapest <= 1150  # the profile's cheapest: 1080 MHz


def test_the_ideal_physics_keeps_the_power_models_own_clocks() -> None:
    gpu = SimulatedGPU(0, MODEL, physics=Physics.ideal())
    assert gpu.model == MODEL and gpu.supported_sm_clocks_mhz()[0] == 1740
    assert gpu.model.clock.power_factor(870) == pytest.approx(0.25)  # (f / f_max) ** 2


@pytest.mark.parametrize("name", GPUS)
def test_no_gpu_draws_more_than_its_power_limit_once_settled(name: SimulatedGpuName) -> None:
    clock = VirtualClock()
    over = []
    for index in range(32):
        gpu = gpu_of(name, clock, index)
        for limit_w in (100.0, 125.0, 150.0, 175.0, 200.0, 250.0, 300.0):
            gpu.set_power_limit_w(limit_w)
            clock.sleep(2.0)
            with gpu.busy():
                start_j, start_s = gpu.energy_j(), clock()
                clock.sleep(30.0)  # long beside the counter's period: its steps are under 0.5% of it
                mean_w = (gpu.energy_j() - start_j) / (clock() - start_s)
            if gpu.busy_power_w() > limit_w or mean_w > limit_w * 1.005:
                over.append((index, limit_w, gpu.busy_power_w(), mean_w))
    assert over == []


def test_gpus_differ_in_time_under_a_binding_cap_and_not_without_one() -> None:
    clock = VirtualClock()
    gpus = [gpu_of(SimulatedGpuName.H100, clock, index) for index in range(16)]
    for gpu in gpus:
        gpu.set_power_limit_w(150.0)
    clock.sleep(2.0)
    capped = [settled(gpu)[0] for gpu in gpus]
    for gpu in gpus:
        gpu.set_power_limit_w(300.0)
    clock.sleep(2.0)
    uncapped = [settled(gpu)[0] for gpu in gpus]
    assert len(set(uncapped)) == 1  # the model's time: the cap does not bind at 300 W
    assert max(capped) / min(capped) > 1.02  # some GPUs hit the cap and run slower
    assert min(capped) == pytest.approx(MODEL.at_limit(150.0)[0])  # those within it run at the model's time


def test_a_locked_clock_settles_faster_than_a_power_limit() -> None:
    clock = VirtualClock()
    preset = PRESETS[SimulatedGpuName.H100]
    assert preset.clock_settle_s < preset.power_limit_settle_s

    def settled_share(change: Callable[[SimulatedGPU], None], after_s: float) -> float:
        gpu, target = gpu_of(SimulatedGpuName.H100, clock), gpu_of(SimulatedGpuName.H100, clock)
        change(target)
        clock.sleep(5.0)
        before = settled(gpu)[1]
        change(gpu)
        clock.sleep(after_s)
        return (settled(gpu)[1] - before) / (settled(target)[1] - before)

    clock_share = settled_share(lambda g: g.lock_sm_clocks_mhz(990, 990), 0.03)
    limit_share = settled_share(lambda g: g.set_power_limit_w(150.0), 0.03)
    assert clock_share > 0.9 > 0.5 > limit_share


def test_locking_the_clock_takes_the_calls_time() -> None:
    clock = VirtualClock()
    gpu = gpu_of(SimulatedGpuName.H100, clock)
    before = clock()
    gpu.lock_sm_clocks_mhz(990, 990)
    assert clock() - before == pytest.approx(PRESETS[SimulatedGpuName.H100].clock_set_s)


@pytest.mark.parametrize(
    ("name", "changes_per_s", "averaged"),
    [("h100", 10, True), ("a100", 10, False), ("v100", 50, False), ("mi300x", 1000, False)],
)
def test_each_preset_has_its_counter_period_and_power_reading(name: str, changes_per_s: int, averaged: bool) -> None:
    clock = VirtualClock()
    gpu = gpu_of(SimulatedGpuName(name), clock)
    values = []
    with gpu.busy():
        start = clock()
        while clock() - start < 2.0:
            values.append(gpu.energy_j())
            clock.sleep(0.0002)
    changes = sum(1 for a, b in itertools.pairwise(values) if b != a)
    reads_per_s = len(values) / 2.0
    assert changes / 2.0 == pytest.approx(min(changes_per_s, reads_per_s), rel=0.1)
    assert (gpu.physics.power_window_s > 0) is averaged


def test_the_configuration_key_and_the_environment_choose_the_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (gpu,) = discover("simulated", persist_dir=tmp_path, simulated_physics="realistic", simulated_gpu="a100").gpus
    assert gpu.describe()["simulated_gpu"] == "a100" and gpu.supported_sm_clocks_mhz()[0] == 1410
    monkeypatch.setenv("WATTWISE_SIMULATED_GPU", "v100")
    (gpu,) = discover("simulated", persist_dir=tmp_path, simulated_physics="realistic").gpus
    assert gpu.describe()["simulated_gpu"] == "v100"
    assert Physics.named("realistic", gpu="mi300x").gpu == SimulatedGpuName.MI300X  # the key wins
    assert load_config(overrides=["devices.simulated_gpu=h100"]).devices.simulated_gpu == "h100"
    with pytest.raises(ConfigError, match=r"devices\.simulated_gpu must be one of h100, a100, v100, mi300x"):
        load_config(overrides=["devices.simulated_gpu=b200"])
    monkeypatch.setenv("WATTWISE_SIMULATED_GPU", "b200")
    with pytest.raises(UsageError, match=re.escape("WATTWISE_SIMULATED_GPU must be one of h100, a100, v100, mi300x")):
        Physics.named("realistic")


def test_a_reopened_gpu_keeps_its_preset(tmp_path: Path) -> None:
    from wattwise.devices import open_spec

    (gpu,) = discover("simulated", persist_dir=tmp_path, simulated_physics="realistic", simulated_gpu="v100").gpus
    assert open_spec(gpu.spec()).describe()["simulated_gpu"] == "v100"


def test_wattwise_devices_json_shows_the_preset_and_its_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "realistic")
    monkeypatch.setenv("WATTWISE_SIMULATED_GPU", "a100")
    monkeypatch.setenv("WATTWISE_STATE_DIR", str(tmp_path))
    assert wattwise_main(["devices", "--backend", "simulated", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    (device,) = [d for d in shown["devices"] if d.get("backend") == "simulated"]
    assert device["physics"] == "realistic"  # the fields it had are still there
    assert device["simulated_gpu"] == "a100"
    preset = device["preset"]
    assert preset["energy_update_period_s"] == 0.1 and preset["power_reading"] == "instantaneous"
    assert "Yang et al., SC'24" in preset["sources"]["energy_update_period_s"]
    assert "Perseus" in preset["sources"]["clock_curve"]


def test_the_temperature_is_off_by_default_and_raises_energy_per_step_when_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WATTWISE_SIMULATED_TEMPERATURE", raising=False)
    assert Physics.named("realistic").temperature_rise_k == 0.0
    clock = VirtualClock()
    gpu = gpu_of(SimulatedGpuName.H100, clock, temperature=True)
    gpu.set_power_limit_w(300.0)
    clock.sleep(1.0)

    def step_energy_j() -> float:
        with gpu.busy():
            start = gpu.energy_j()
            clock.sleep(5.0)
            return gpu.energy_j() - start

    cool = step_energy_j()
    with gpu.busy():
        clock.sleep(300.0)  # five minutes of load
    warm = step_energy_j()
    assert gpu.temperature_rise_k > 25.0
    assert warm > cool * 1.03
    clock.sleep(600.0)  # idle: it cools down
    gpu.energy_j()
    assert gpu.temperature_rise_k < 2.0
    monkeypatch.setenv("WATTWISE_SIMULATED_TEMPERATURE", "on")
    assert Physics.named("realistic").temperature_rise_k > 0
    monkeypatch.setenv("WATTWISE_SIMULATED_TEMPERATURE", "hot")
    with pytest.raises(UsageError, match="WATTWISE_SIMULATED_TEMPERATURE must be on or off"):
        Physics.named("realistic")


def test_a_warm_gpu_under_a_binding_cap_stays_within_it_and_runs_slower() -> None:
    clock = VirtualClock()
    gpu = gpu_of(SimulatedGpuName.H100, clock, temperature=True)
    gpu.set_power_limit_w(150.0)
    clock.sleep(1.0)
    cool_time = settled(gpu)[0]
    with gpu.busy():
        clock.sleep(300.0)
        gpu.energy_j()
    warm_time, warm_w = settled(gpu)
    assert warm_w <= 150.0 and warm_time > cool_time
