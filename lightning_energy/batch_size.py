"""`RecurringBatchSizeCallback`: each fit is one run of a recurring job, on the batch size the history chose.

A thin adapter over the run's recurring-job part (`wattwise.run.recurring.RecurringJobRun`). At
`setup("fit")` it asks the store for the run's batch size and sets it where Lightning's `BatchSizeFinder`
would (the module, its `hparams`, the datamodule); it steers the trainer's `EnergyCallback` to cap at the
power limit remembered for that batch size, or to tune one when there is none. After every training epoch
it reports the latest validated metric and the energy so far and stops a run that reached the target or
would cost too much (`trainer.should_stop`). When fit ends it records the run's result with the
`EnergyCallback`'s figures. Under distributed training only the global rank 0 talks to the store; its
decisions are broadcast.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr
from typing_extensions import override

from lightning_energy.callback import EnergyCallback
from wattwise.errors import UsageError
from wattwise.recurring import Recommendation, StoredRun
from wattwise.recurring.spec import MetricModeName
from wattwise.run.recurring import RecurringJobRun, job_spec


class RecurringBatchSizeCallback(Callback):
    """Choose this fit's batch size and power limit from the job's history; stop it early; record it.

    Needs an `EnergyCallback` in the same trainer (it measures the energy the decisions are priced with
    and applies the power limit); list order does not matter. This callback sets that callback's power
    limit mode: "cap" at the limit remembered for the batch size, else "tune" (the limit it chooses is
    remembered when fit ends).

    Args:
        job: the job's name in the store; runs of one job share their history.
        batch_sizes: the batch sizes to choose from.
        default_batch_size: where exploration starts (one of `batch_sizes`).
        target_metric: the value of `monitor` at which a run has reached its goal.
        max_epochs: a run that has not reached the target after this many epochs fails.
        max_power_w: the highest power limit summed over the job's GPUs, in watts: the price of a second.
        monitor: the validation metric compared with `target_metric` (a key of `trainer.callback_metrics`).
        mode: "min" (the metric must fall to the target, e.g. a loss) or "max" (rise to it, e.g. accuracy).
        eta: weight of energy against time in the cost `eta * E + (1 - eta) * max_power_w * T`.
        beta: a run stops before its cost would exceed `beta` times the least cost of a run that reached
            the target.
        store: a SQLite file path or database URL; None: `$WATTWISE_STORE`, else the state directory.
        batch_size_attr: the attribute holding the batch size, as for `BatchSizeFinder`.
    """

    def __init__(
        self,
        job: str,
        batch_sizes: list[int],
        default_batch_size: int,
        target_metric: float,
        max_epochs: int,
        max_power_w: float,
        monitor: str,
        mode: MetricModeName = "min",
        eta: float = 0.5,
        beta: float = 2.0,
        store: str | None = None,
        batch_size_attr: str = "batch_size",
    ) -> None:
        super().__init__()
        self.spec = job_spec(
            job=job,
            batch_sizes=batch_sizes,
            default_batch_size=default_batch_size,
            target_metric=target_metric,
            max_epochs=max_epochs,
            max_power_w=max_power_w,
            mode=mode,
            eta=eta,
            beta=beta,
        )
        self.monitor = monitor
        self.store = store
        self.batch_size_attr = batch_size_attr
        self._job_run: RecurringJobRun | None = None
        self._energy: EnergyCallback | None = None

    @property
    def recommendation(self) -> Recommendation | None:
        """This fit's run: its id, batch size and remembered power limit (every rank), set at setup."""
        return self._job_run.recommendation if self._job_run is not None else None

    @property
    def result(self) -> StoredRun | None:
        """The run as recorded at the end of fit (global rank 0 only)."""
        return self._job_run.result if self._job_run is not None else None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Choose this run's batch size and power limit from the job's history, and set them.

        Raises:
            UsageError: no `EnergyCallback` in the Trainer, dataloaders passed to `fit()`, or no batch-size field.
        """
        if stage != "fit":
            return
        self._energy = _energy_callback(trainer)
        self._check_batch_size_attr(trainer, pl_module)
        run = self._energy.run_for_fit(trainer)
        self._job_run = RecurringJobRun(self.spec, store=self.store, collective=run.collective)
        rec = self._job_run.begin(run)
        lightning_setattr(pl_module, self.batch_size_attr, rec.batch_size)
        rank_zero_info(self._job_run.describe())

    def _check_batch_size_attr(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # As BatchSizeFinder: a batch size set on the module never reaches dataloaders given to `fit`.
        if not trainer.fit_loop._data_source.is_module():
            raise UsageError(
                "RecurringBatchSizeCallback sets the batch size on the LightningModule or "
                "LightningDataModule; dataloaders passed to `fit()` ignore it. Build them in "
                "`train_dataloader()` from the module's or datamodule's batch size."
            )
        if not lightning_hasattr(pl_module, self.batch_size_attr):
            raise UsageError(
                f"field {self.batch_size_attr!r} not found in the model, the datamodule, nor their "
                f"`hparams`; add it, or name the field with batch_size_attr="
            )

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Keep the monitored metric of this validation for the epoch's report.

        Raises:
            UsageError: validation did not log the monitored metric.
        """
        if trainer.sanity_checking or self._job_run is None or not self._job_run.is_open:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise UsageError(
                f"RecurringBatchSizeCallback monitors {self.monitor!r}, which validation did not "
                f"log; logged metrics: {sorted(trainer.callback_metrics)}"
            )
        self._job_run.report(float(value))

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Validation at the end of an epoch runs before this hook, so the metric is the epoch's own."""
        if self._job_run is None or self._energy is None or self._energy.run is None:
            return
        reason = self._job_run.epoch_end(self._energy.run)
        if reason is not None:
            rank_zero_info(self._job_run.stop_note())
            trainer.should_stop = True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """After every callback's `on_fit_end`, so the EnergyCallback's summary is there."""
        if stage == "fit":
            self._close_job_run(failed=False)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Record the run as failed."""
        self._close_job_run(failed=True)

    def _close_job_run(self, *, failed: bool) -> None:
        if self._job_run is not None and self._energy is not None and self._energy.run is not None:
            self._job_run.close(self._energy.run, failed=failed)


def _energy_callback(trainer: pl.Trainer) -> EnergyCallback:
    found = [cb for cb in trainer.callbacks if isinstance(cb, EnergyCallback)]  # type: ignore[attr-defined]
    if len(found) != 1:
        raise UsageError(
            f"RecurringBatchSizeCallback needs exactly one EnergyCallback in the same Trainer (found {len(found)}): "
            "it measures the energy each run is priced with and applies the power limit, e.g. "
            "Trainer(callbacks=[EnergyCallback(), RecurringBatchSizeCallback(...)])"
        )
    return found[0]
