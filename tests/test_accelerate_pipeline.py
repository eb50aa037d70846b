"""accelerate_energy.follow_frequency_plan: the stage follows its plan until end_training resets clocks."""

from __future__ import annotations

import json

from accelerate import Accelerator

import accelerate_energy
from wattwise.devices import SimulatedGPU


class FakeStage:
    stage_index = 0

    def __init__(self, gpu: SimulatedGPU) -> None:
        self.gpu = gpu
        self.seen: list[object] = []

    def forward_one_chunk(self, mb: int, *args, **kwargs):
        self.seen.append(self.gpu.locked_sm_clocks_mhz())

    def backward_one_chunk(self, mb: int, *args, **kwargs):
        self.seen.append(self.gpu.locked_sm_clocks_mhz())


def test_stage_follows_plan_and_end_training_resets(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": [[["forward", 0, 1200], ["backward", 0, 1740]]]}))
    gpu = SimulatedGPU(0)
    stage = FakeStage(gpu)
    accelerator = Accelerator(cpu=True)
    controller = accelerate_energy.follow_frequency_plan(accelerator, stage, str(plan), device=gpu)
    stage.forward_one_chunk(0)
    stage.backward_one_chunk(0)
    assert stage.seen == [(1200, 1200), (1740, 1740)]
    assert controller.applied == [("forward", 0, 1200), ("backward", 0, 1740)]
    accelerator.end_training()
    assert gpu.locked_sm_clocks_mhz() is None
