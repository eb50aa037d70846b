"""One run of a recurring job: wattwise picks this run's batch size and power limit from the runs before.

    python examples/recurring_job.py        # run it several times; `wattwise jobs show regression` shows them

Each run is a Lightning fit with `RecurringBatchSizeCallback` beside an `EnergyCallback`: the batch size
comes from the job's history in the store (`WATTWISE_STORE`, default a SQLite file in the state
directory), the run stops when the validation loss reaches the target (or is hopeless), and its energy
and time are recorded for the next run. On the simulated GPU (`WATTWISE_BACKEND=simulated`) each step
lasts the modelled time.
"""

from __future__ import annotations

import argparse
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn

from lightning_energy import EnergyCallback, RecurringBatchSizeCallback
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model

#: One regression problem: the first 1024 samples train, the last 256 validate.
DATA = tiny_dataset(1280)


class Regression(pl.LightningModule):
    """A tiny regression model whose batch size the recurring-job callback sets."""

    def __init__(self, energy: EnergyCallback) -> None:
        super().__init__()
        self.model = tiny_model()
        self.energy = energy
        self.batch_size = 32

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.model(x), y)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.model(x), y))

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        gpus = self.energy.run.gpus if self.energy.run is not None else []
        emulate_step(gpus, lambda: optimizer.step(closure=optimizer_closure))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        train = torch.utils.data.Subset(DATA, range(1024))
        return torch.utils.data.DataLoader(train, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        return torch.utils.data.DataLoader(torch.utils.data.Subset(DATA, range(1024, 1280)), batch_size=64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default="regression")
    parser.add_argument("--max-epochs", type=int, default=4)
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)  # the same start for every run of the job: its runs differ by batch size

    energy = EnergyCallback(output_dir=f"wattwise_runs/{args.job}")
    recurring = RecurringBatchSizeCallback(
        job=args.job,
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.05,
        monitor="val_loss",
        mode="min",
        max_epochs=args.max_epochs,
        max_power_w=300.0,
    )
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[energy, recurring],
    )
    trainer.fit(Regression(energy))
    result = recurring.result
    if result is not None:
        print(f"run {result.run_id}: batch size {result.batch_size}, reached {result.reached}, {result.energy_j:.1f} J")


if __name__ == "__main__":
    main()
