"""A plain Lightning training script with wattwise's `EnergyCallback`.

    python examples/lightning_train.py --mode tune

On a machine without a GPU, ask for the simulated GPU (`WATTWISE_BACKEND=simulated`): each optimizer step
then lasts the time the simulated GPU's power model gives for its current power limit (`emulate_step`),
so power-limit tuning has something to tune. On a real GPU `emulate_step` just runs the step. The run's
`summary.json` goes to `--output-dir`.
"""

from __future__ import annotations

import argparse
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn

from lightning_energy import EnergyCallback
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model


class Regression(pl.LightningModule):
    """A tiny regression model; its optimizer step runs as one emulated GPU step."""

    def __init__(self, energy: EnergyCallback, batch_size: int = 32) -> None:
        super().__init__()
        self.model = tiny_model()
        self.energy = energy
        self.batch_size = batch_size

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        gpus = self.energy.run.gpus if self.energy.run is not None else []
        emulate_step(gpus, lambda: optimizer.step(closure=optimizer_closure))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        return torch.utils.data.DataLoader(tiny_dataset(2048), batch_size=self.batch_size, shuffle=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="tune", choices=["measure", "tune", "cap"])
    parser.add_argument("--max-steps", type=int, default=1000)
    parser.add_argument("--output-dir", default="wattwise_runs/lightning")
    args = parser.parse_args()

    energy = EnergyCallback(mode=args.mode, output_dir=args.output_dir)
    trainer = pl.Trainer(
        max_steps=args.max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[energy],
    )
    trainer.fit(Regression(energy))


if __name__ == "__main__":
    main()
