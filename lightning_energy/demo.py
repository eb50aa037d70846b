"""The emulated workload as a LightningModule, and the Lightning runner of `wattwise demo`."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from typing_extensions import override

from lightning_energy.callback import EnergyCallback
from wattwise.devices.base import Device
from wattwise.run import Run
from wattwise.tools.demo import DemoOptions, tuned_and_baseline
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model


class EmulatedModule(pl.LightningModule):
    """A tiny regression model whose steps take the simulated GPU's modelled time.

    The GPUs come from `gpus`, or from the trainer's `EnergyCallback` (so both share one simulated GPU).
    """

    def __init__(
        self, gpus: list[Device] | None = None, batch_size: int = 32, lr: float = 0.05, dataset_size: int = 4096
    ) -> None:
        super().__init__()
        self.model = tiny_model()
        self.batch_size = batch_size
        self.lr = lr
        self.dataset_size = dataset_size
        self._gpus = gpus

    def gpus(self) -> list[Device]:
        """The GPUs a step runs on: those given, else the trainer's `EnergyCallback`'s."""
        if self._gpus is None:
            for cb in self.trainer.callbacks:  # type: ignore[attr-defined]
                if isinstance(cb, EnergyCallback) and cb.run is not None:
                    self._gpus = cb.run.gpus
                    break
        return self._gpus or []

    @override
    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """Mean squared error of one batch."""
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.log("train_loss", loss, prog_bar=False)
        return loss

    @override
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        """Log the validation loss of one batch."""
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.model(x), y), sync_dist=True)

    @override
    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        """Forward, backward and update as one emulated GPU step."""
        # Forward, backward and update run inside one emulated GPU step.
        emulate_step(self.gpus(), lambda: optimizer.step(closure=optimizer_closure))

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Plain SGD."""
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    @override
    def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        """The fixed regression problem, shuffled."""
        return torch.utils.data.DataLoader(tiny_dataset(self.dataset_size), batch_size=self.batch_size, shuffle=True)

    @override
    def val_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        """A second sample of the problem's inputs."""
        return torch.utils.data.DataLoader(tiny_dataset(256, seed=1), batch_size=self.batch_size)


class _StopWhen(pl.Callback):
    """Ends the fit after the batch at which `stop(run)` says so."""

    def __init__(self, energy: EnergyCallback, stop: Callable[[Run], bool]) -> None:
        self.energy, self.stop = energy, stop

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if self.energy.run is not None and self.stop(self.energy.run):
            trainer.should_stop = True


def _fit(overrides: list[str], steps: int, stop: Callable[[Run], bool] | None) -> dict[str, Any]:
    callback = EnergyCallback(overrides=overrides)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[callback] if stop is None else [callback, _StopWhen(callback, stop)],
    )
    trainer.fit(EmulatedModule())
    if callback.summary is None:
        raise RuntimeError("the energy callback produced no summary; see the warnings above")
    return callback.summary


def run_demo(options: DemoOptions) -> dict[str, Any]:
    """Train with power-limit tuning, then the same steps at the maximum limit; compare."""
    # The demo prints its own report; Lightning's start-up chatter and per-run summaries would bury it.
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="lightning.pytorch.utilities._pytree")
    return tuned_and_baseline(options, "lightning", _fit)
