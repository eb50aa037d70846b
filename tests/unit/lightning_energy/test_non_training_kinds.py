"""What is not training is reported under its own kind (issue 27): a checkpoint that Lightning saves at the end
of each validation is a checkpoint, not more validation, and every validation is counted."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices import PowerModel, SimulatedGPU


def test_each_validation_and_each_checkpoint_after_it_are_counted_under_their_own_kind(
    tmp_path: Path, virtual_clock
) -> None:
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.01, clock=virtual_clock, sleep=virtual_clock.sleep)
    energy = EnergyCallback(output_dir=str(tmp_path / "run"), devices=[gpu], overrides=["monitor.sample_power=false"])
    saves = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=-1)  # saves at the end of every validation
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=8,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        default_root_dir=str(tmp_path),
        callbacks=[energy, saves],
    )
    trainer.fit(EmulatedModule(gpus=[gpu], dataset_size=64))
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 8
    pauses = json.loads((tmp_path / "run" / "summary.json").read_text())["non_training"]
    assert pauses["validation"]["count"] == 8
    assert pauses["checkpoint"]["count"] == 8  # the virtual clock stands still outside steps: counts only
