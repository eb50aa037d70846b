"""PipelineFrequencyCallback wires the controller onto the module's stage for the length of a fit, and the
fit's energy record names the plan it followed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from lightning_energy import EnergyCallback, PipelineFrequencyCallback
from wattwise.devices import SimulatedGPU
from wattwise.record.files import read_run_dir


class FakeStage:
    """Stands in for a torch.distributed.pipelining stage: the schedule calls these per microbatch."""

    stage_index = 1

    def __init__(self, gpu: SimulatedGPU) -> None:
        self.gpu = gpu
        self.clocks_seen: list[tuple[str, int, object]] = []
        #: Waits until the clock changes asked for have been made (the controller sets clocks off this thread).
        self.settle: Callable[[], None] = lambda: None

    def forward_one_chunk(self, mb: int, *args, **kwargs):
        self.settle()
        self.clocks_seen.append(("forward", mb, self.gpu.locked_sm_clocks_mhz()))

    def backward_one_chunk(self, mb: int, *args, **kwargs):
        self.settle()
        self.clocks_seen.append(("backward", mb, self.gpu.locked_sm_clocks_mhz()))


class StagedModule(pl.LightningModule):
    def __init__(self, stage: FakeStage, fail_at: int | None = None) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.pipeline_stage = stage
        self.fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise RuntimeError("boom")
        for mb in range(2):
            self.pipeline_stage.forward_one_chunk(mb)
        for mb in range(2):
            self.pipeline_stage.backward_one_chunk(mb)
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)


def trainer(*callbacks) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
    )


def energy(gpu: SimulatedGPU, out: Path) -> EnergyCallback:
    return EnergyCallback(devices=[gpu], output_dir=str(out), overrides=["monitor.sample_power=false"])


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            {
                "plan": [
                    [["forward", 0, 1740], ["forward", 1, 1740], ["backward", 0, 1740], ["backward", 1, 1740]],
                    [["forward", 0, 1410], ["forward", 1, 1200], ["backward", 0, 1740], ["backward", 1, 1500]],
                ]
            }
        )
    )
    return path


def test_the_stage_runs_each_instruction_at_its_planned_clock_and_resets_after(plan_file):
    gpu = SimulatedGPU(0)
    stage = FakeStage(gpu)
    cb = PipelineFrequencyCallback(str(plan_file), device=gpu)
    stage.settle = lambda: cb.controller.settle() if cb.controller is not None else None
    trainer(cb).fit(StagedModule(stage))
    expected = [
        ("forward", 0, (1410, 1410)),
        ("forward", 1, (1200, 1200)),
        ("backward", 0, (1740, 1740)),
        ("backward", 1, (1500, 1500)),
    ]
    assert stage.clocks_seen == expected * 2
    assert gpu.locked_sm_clocks_mhz() is None
    assert stage.forward_one_chunk.__func__ is FakeStage.forward_one_chunk  # unhooked


def test_clocks_are_reset_when_training_fails(plan_file):
    gpu = SimulatedGPU(0)
    cb = PipelineFrequencyCallback(str(plan_file), device=gpu)
    with pytest.raises(RuntimeError, match="boom"):
        trainer(cb).fit(StagedModule(FakeStage(gpu), fail_at=1))
    assert gpu.locked_sm_clocks_mhz() is None


@pytest.mark.parametrize("energy_first", [True, False], ids=["energy-first", "pipeline-first"])
def test_the_summary_of_a_fit_that_follows_a_plan_names_the_plan_file(plan_file, tmp_path, energy_first):
    gpu = SimulatedGPU(0)
    measured = energy(gpu, tmp_path / "run")
    follow = PipelineFrequencyCallback(str(plan_file), device=gpu)
    trainer(*((measured, follow) if energy_first else (follow, measured))).fit(StagedModule(FakeStage(gpu)))

    assert json.loads((tmp_path / "run" / "summary.json").read_text())["settings"]["frequency_plan"] == str(plan_file)
    assert read_run_dir(tmp_path / "run").summary.settings.frequency_plan == str(plan_file)
    assert measured.run is not None and measured.run.final_summary is not None
    assert measured.run.final_summary.settings.frequency_plan == str(plan_file)


def test_the_summary_of_a_fit_without_a_plan_has_no_frequency_plan(tmp_path):
    gpu = SimulatedGPU(0)
    trainer(energy(gpu, tmp_path / "run")).fit(StagedModule(FakeStage(gpu)))

    assert json.loads((tmp_path / "run" / "summary.json").read_text())["settings"]["frequency_plan"] is None
    assert read_run_dir(tmp_path / "run").summary.settings.frequency_plan is None
