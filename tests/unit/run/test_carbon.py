"""Carbon-aware power limit inside a run: the run follows the grid intensity after tuning."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.clock import VirtualClock
from tests.support.tuning_runs import NO_WAIT_PROFILE
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.power_limit import select_power_limit
from wattwise.run import Run
from wattwise.tools.workload import emulate_step

START = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc).timestamp()


def run(tmp_path, overrides, steps: int, step_s: float = 1.0):
    clock = VirtualClock(START)
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=step_s, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=[*NO_WAIT_PROFILE, f"output_dir={tmp_path / 'run'}", *overrides])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    run.epoch_begin()
    for _ in range(steps):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
    run.epoch_end()
    run.finish()
    return run, run.summary


def test_constant_dirty_grid_keeps_the_energy_optimal_limit(tmp_path):
    run_, summary = run(tmp_path, ["carbon.aware=true", "carbon.intensity_g_per_kwh=500"], 20)
    assert run_.power.tuner is not None
    energy_opt = select_power_limit(run_.power.tuner.profile, "energy").power_limit_w
    assert summary["settings"]["power_limit_w"] == energy_opt
    assert summary["carbon_aware"]["intensity_source"] == "carbon.intensity_g_per_kwh"


def test_limit_switches_when_the_intensity_crosses_the_threshold(tmp_path):
    # Tuning takes 10 steps of 1-2.6 s; then clean (100 g) until START+60 s, dirty (600 g) after.
    csv = tmp_path / "ci.csv"
    rows = ["timestamp,value"]
    for k in range(0, 400, 30):
        ts = dt.datetime.fromtimestamp(START + k, tz=dt.timezone.utc).isoformat()
        rows.append(f"{ts},{100 if k < 60 else 600}")
    csv.write_text("\n".join(rows) + "\n")
    run_, summary = run(tmp_path, ["carbon.aware=true", f"carbon.intensity_csv={csv}", "carbon.interval_s=5"], 80)
    assert run_.power.tuner is not None
    time_opt = select_power_limit(run_.power.tuner.profile, "time").power_limit_w
    energy_opt = select_power_limit(run_.power.tuner.profile, "energy").power_limit_w
    assert time_opt != energy_opt
    # The first 5 changes are the profiled limits (300 ... 100 W); the carbon-aware ones follow.
    changes = [(e["timestamp"] - START, e["value"]) for e in summary["settings_timeline"]][5:]
    assert changes[0][1] == time_opt and changes[0][0] < 60
    assert changes[-1][1] == energy_opt and changes[-1][0] >= 60
    assert changes[-1][0] < 60 + 5 + 3  # re-checked within one interval (plus one step)


def test_carbon_aware_needs_tuning_and_one_intensity_source():
    from wattwise.errors import ConfigError

    with pytest.raises(ConfigError, match=r"power_limit\.mode=tune"):
        load_config(overrides=["carbon.aware=true", "carbon.intensity_g_per_kwh=100"])
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(overrides=[*NO_WAIT_PROFILE, "carbon.aware=true"])
