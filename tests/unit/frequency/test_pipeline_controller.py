"""The frequency controller on a real 2-stage 1F1B pipeline (two CPU processes, gloo, simulated GPUs)."""

from __future__ import annotations

import functools
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import wattwise.devices.rapl
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml
from tests.support.paths import SCRIPTS_DIR
from wattwise.devices import NotSupportedError, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.frequency.controller import FrequencyController, follow_plan, stage_plan
from wattwise.pipeline.schedule import one_f_one_b
from wattwise.settings.guard import SettingsGuard

SCRIPT = SCRIPTS_DIR / "pipeline_run.py"
MAX_MHZ = 1740


def plan_for(freq_of) -> list[list[list[object]]]:
    """Per stage, the 1F1B order of our own schedule with a frequency per instruction."""
    return [[[s.instruction, s.microbatch, freq_of(stage, s.instruction, s.microbatch)] for s in steps]
            for stage, steps in enumerate(one_f_one_b(2, 4))]


def run_pipeline(tmp_path: Path, name: str, plan) -> list[dict]:
    out = tmp_path / name
    out.mkdir()
    plan_file = out / "plan.json"
    plan_file.write_text(json.dumps({"plan": plan}))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), str(plan_file)], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_pipeline_follows_the_plan_and_saves_energy_against_maximum_frequency(tmp_path):
    # Forwards are shorter than backwards: slow the forwards down, keep the backwards at full clock.
    plan = plan_for(lambda stage, instr, mb: 1215 if instr == "forward" else MAX_MHZ)
    planned = run_pipeline(tmp_path, "planned", plan)
    fastest = run_pipeline(tmp_path, "max", plan_for(lambda *_: MAX_MHZ))
    for rank, result in enumerate(planned):
        assert result["applied"] == plan[rank] * 3  # the applied sequence equals the plan, every iteration
        freqs = [f for _, _, f in result["applied"]]
        changes = 1 + sum(a != b for a, b in itertools.pairwise(freqs))
        assert result["clock_changes"] == changes  # the clock is locked only when the frequency changes
        assert result["locked_during"] is not None and result["locked_after"] is None  # reset at the end
    assert all(r["clock_changes"] == 1 for r in fastest)
    planned_j = sum(r["energy_j"] for r in planned)
    fastest_j = sum(r["energy_j"] for r in fastest)
    assert planned_j < fastest_j


def test_plan_validation_names_the_entry():
    with pytest.raises(UsageError, match="entry 1"):
        stage_plan([["forward", 0, 1740], ["sideways", 0, 1740]])
    with pytest.raises(UsageError, match="twice"):
        stage_plan([["forward", 0, 1740], ["forward", 0, 1410]])
    with pytest.raises(UsageError, match="empty"):
        stage_plan([])


def test_unsupported_frequency_is_rejected_before_training(tmp_path):
    gpu = SimulatedGPU(0)
    with SettingsGuard(tmp_path) as guard, pytest.raises(UsageError, match="not supported"):
        FrequencyController(stage_plan([["forward", 0, 1741]]), gpu, guard)


def test_controller_locks_only_on_change_and_guard_resets(tmp_path):
    gpu = SimulatedGPU(0)
    plan = stage_plan([["forward", 0, 1410], ["forward", 1, 1410], ["backward", 0, 1740], ["backward", 1, 1740]])
    with SettingsGuard(tmp_path) as guard:
        ctrl = FrequencyController(plan, gpu, guard)
        for p in plan:
            ctrl.before(p.instruction, p.microbatch)
            assert gpu.locked_sm_clocks_mhz() == (p.frequency_mhz, p.frequency_mhz)
        assert ctrl.clock_changes == 2
    assert gpu.locked_sm_clocks_mhz() is None


def test_following_a_plan_without_a_gpu_says_it_needs_one(real_auto_backend, monkeypatch, tmp_path):
    FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    monkeypatch.setattr(wattwise.devices.rapl, "rapl_domains",
                        functools.partial(wattwise.devices.rapl.rapl_domains, tmp_path / "no-powercap"))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"plan": plan_for(lambda *_: MAX_MHZ)}))
    with pytest.raises(NotSupportedError, match="locks GPU clocks; no NVIDIA GPU found"):
        follow_plan(SimpleNamespace(stage_index=0), str(plan_file), local_rank=0)
