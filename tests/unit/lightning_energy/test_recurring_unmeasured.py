"""A recurring run stops at its target even when nothing is measured (issue 27): with no device to measure
(the EnergyCallback warns once), RecurringBatchSizeCallback still ends the fit at the epoch the target is
reached, or at the job's most epochs, instead of training to the Trainer's own max_epochs; and the run is
recorded in the job store with what is known (time, epochs, reached or not) and no energy."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from lightning_energy import EnergyCallback, RecurringBatchSizeCallback
from lightning_energy.demo import EmulatedModule
from wattwise.errors import EnergyPluginWarning
from wattwise.store import store_url
from wattwise.store.sql import SqlJobStore


class ReachesAt(EmulatedModule):
    """Logs `val_acc` 1.0 from epoch `reach` on (never, when None), else 0.0."""

    def __init__(self, reach: int | None) -> None:
        super().__init__(gpus=[], dataset_size=64)
        self.reach = reach

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val_acc", 1.0 if self.reach is not None and self.current_epoch + 1 >= self.reach else 0.0)


@pytest.mark.parametrize(("reach", "epochs"), [(3, 3), (None, 5)])
def test_an_unmeasured_recurring_run_stops_at_its_target_or_its_most_epochs(
    tmp_path: Path, reach: int | None, epochs: int
) -> None:
    store = str(tmp_path / "jobs.sqlite")
    job = RecurringBatchSizeCallback(
        job="nightly",
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=5,
        max_power_w=300.0,
        monitor="val_acc",
        mode="max",
        store=store,
    )
    energy = EnergyCallback(devices=[], output_dir=str(tmp_path / "run"))  # nothing to measure
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=100,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        default_root_dir=str(tmp_path),
        callbacks=[energy, job],
    )
    with pytest.warns(EnergyPluginWarning) as warned:
        trainer.fit(ReachesAt(reach))
    assert len([w for w in warned if w.category is EnergyPluginWarning]) == 1  # nothing to measure: said once
    assert trainer.current_epoch == epochs  # not the Trainer's 100
    assert job._job_run is not None
    assert job._job_run.stop_reason == ("reached" if reach is not None else "max_epochs")
    opened = SqlJobStore(store_url(store))
    try:
        [run] = opened.runs("nightly")
    finally:
        opened.close()
    assert (run.state, run.epochs) == ("reached" if reach is not None else "failed", epochs)  # not left open
    assert run.time_s is not None and run.time_s > 0 and (run.energy_j, run.cost) == (None, None)
