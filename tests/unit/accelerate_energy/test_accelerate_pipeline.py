"""accelerate_energy.follow_frequency_plan: the stage follows its plan until end_training resets clocks, and
the run's energy record names the plan it followed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

import accelerate_energy
from accelerate_energy import EnergyPlugin
from wattwise.devices import SimulatedGPU
from wattwise.record.files import read_run_dir

pytestmark = pytest.mark.usefixtures("fresh_accelerate")


class FakeStage:
    stage_index = 0

    def __init__(self, gpu: SimulatedGPU) -> None:
        self.gpu = gpu
        self.seen: list[object] = []
        #: Waits until the clock changes asked for have been made (the controller sets clocks off this thread).
        self.settle: Callable[[], None] = lambda: None

    def forward_one_chunk(self, mb: int, *args, **kwargs):
        self.settle()
        self.seen.append(self.gpu.locked_sm_clocks_mhz())

    def backward_one_chunk(self, mb: int, *args, **kwargs):
        self.settle()
        self.seen.append(self.gpu.locked_sm_clocks_mhz())


def test_stage_follows_plan_and_end_training_resets(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": [[["forward", 0, 1200], ["backward", 0, 1740]]]}))
    gpu = SimulatedGPU(0)
    stage = FakeStage(gpu)
    accelerator = Accelerator(cpu=True)
    controller = accelerate_energy.follow_frequency_plan(accelerator, stage, str(plan), device=gpu)
    stage.settle = controller.settle
    stage.forward_one_chunk(0)
    stage.backward_one_chunk(0)
    assert stage.seen == [(1200, 1200), (1740, 1740)]
    assert controller.applied == [("forward", 0, 1200), ("backward", 0, 1740)]
    accelerator.end_training()
    assert gpu.locked_sm_clocks_mhz() is None


def measured_accelerator(gpu: SimulatedGPU, out: Path) -> Accelerator:
    plugin = EnergyPlugin(enabled=True, output_dir=str(out), overrides=["monitor.sample_power=false"])
    return accelerate_energy.attach(Accelerator(cpu=True), plugin, devices=[gpu])


def one_step(accelerator: Accelerator, stage: FakeStage | None) -> None:
    """Prepare an optimizer (the energy run starts), run the stage's instructions, take one optimizer step."""
    model = torch.nn.Linear(2, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    if stage is not None:
        stage.forward_one_chunk(0)
        stage.backward_one_chunk(0)
    accelerator.backward(model(torch.randn(4, 2)).sum())
    optimizer.step()
    optimizer.zero_grad()


def test_the_summary_of_a_run_that_follows_a_plan_names_the_plan_file(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"plan": [[["forward", 0, 1200], ["backward", 0, 1740]]]}))
    gpu = SimulatedGPU(0)
    stage = FakeStage(gpu)
    accelerator = measured_accelerator(gpu, tmp_path / "run")
    stage.settle = accelerate_energy.follow_frequency_plan(accelerator, stage, str(plan), device=gpu).settle
    one_step(accelerator, stage)
    accelerator.end_training()

    assert stage.seen == [(1200, 1200), (1740, 1740)]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["settings"]["frequency_plan"] == str(plan)
    assert read_run_dir(tmp_path / "run").summary.settings.frequency_plan == str(plan)
    run = accelerate_energy.energy_run(accelerator)
    assert run is not None and run.final_summary is not None and run.final_summary.settings.frequency_plan == str(plan)


def test_the_summary_of_a_run_without_a_plan_has_no_frequency_plan(tmp_path):
    accelerator = measured_accelerator(SimulatedGPU(0), tmp_path / "run")
    one_step(accelerator, None)
    accelerator.end_training()

    assert json.loads((tmp_path / "run" / "summary.json").read_text())["settings"]["frequency_plan"] is None
    assert read_run_dir(tmp_path / "run").summary.settings.frequency_plan is None
