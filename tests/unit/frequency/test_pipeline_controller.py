"""The frequency controller on a real 2-stage 1F1B pipeline (two CPU processes, gloo, simulated GPUs)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from wattwise.devices import NotSupportedError, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.frequency.controller import FrequencyController, follow_plan, stage_plan
from wattwise.pipeline.schedule import one_f_one_b
from wattwise.settings.guard import SettingsGuard

MAX_MHZ = 1740


def plan_for(freq_of) -> list[list[list[object]]]:
    """Per stage, the 1F1B order of our own schedule with a frequency per instruction."""
    return [
        [[s.instruction, s.microbatch, freq_of(stage, s.instruction, s.microbatch)] for s in steps]
        for stage, steps in enumerate(one_f_one_b(2, 4))
    ]


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


def test_following_a_plan_without_a_gpu_says_it_needs_one(real_auto_backend, bare_machine, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"plan": plan_for(lambda *_: MAX_MHZ)}))
    with pytest.raises(NotSupportedError, match="locks GPU clocks; no NVIDIA GPU found"):
        follow_plan(SimpleNamespace(stage_index=0), str(plan_file), local_rank=0)
