"""`RecurringBatchSizeCallback`: each fit is one run of a recurring job, on the batch size the history chose.

A thin adapter over `wattwise.recurring.BatchSizeOptimizer`. At `setup("fit")` it asks the store for the run's
batch size and sets it where Lightning's `BatchSizeFinder` would (the module, its `hparams`, the
datamodule); it steers the trainer's `EnergyCallback` to cap at the power limit remembered for that batch
size, or to tune one when there is none. After every training epoch it reports the latest validated
metric and the energy so far and stops a run that reached the target or would cost too much
(`trainer.should_stop`). When fit ends it records the run's result with the `EnergyCallback`'s figures.
Under distributed training only the global rank 0 talks to the store; its decisions are broadcast.
"""

from __future__ import annotations

import warnings

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr

from lightning_energy.callback import EnergyCallback
from wattwise.errors import UsageError
from wattwise.recurring import BatchSizeOptimizer, JobSpec, Recommendation, RunRecord, open_store
from wattwise.recurring.spec import MetricMode
from wattwise.session import EnergyPluginWarning, steer_for_recurring_run


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
        mode: MetricMode = "min",
        eta: float = 0.5,
        beta: float = 2.0,
        store: str | None = None,
        batch_size_attr: str = "batch_size",
    ) -> None:
        super().__init__()
        if mode not in ("min", "max"):
            raise UsageError(f"mode must be 'min' (e.g. a loss) or 'max' (e.g. accuracy), got {mode!r}")
        self.spec = JobSpec(name=job, batch_sizes=tuple(batch_sizes), default_batch_size=default_batch_size,
                            target_metric=target_metric, max_epochs=max_epochs, max_power_w=max_power_w,
                            metric_mode=mode, eta=eta, beta=beta)
        self.monitor = monitor
        self.store = store
        self.batch_size_attr = batch_size_attr
        #: This fit's run: its id, batch size and remembered power limit (every rank), set at setup.
        self.recommendation: Recommendation | None = None
        #: The run as recorded at the end of fit (global rank 0 only).
        self.result: RunRecord | None = None
        self._optimizer: BatchSizeOptimizer | None = None
        self._energy: EnergyCallback | None = None
        self._metric: float | None = None
        self._epochs = 0
        #: A run was started at setup and is not recorded yet.
        self._open = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._energy = _energy_callback(trainer)
        self._check_batch_size_attr(trainer, pl_module)
        self._metric, self._epochs, self.result = None, 0, None
        if trainer.is_global_zero:
            self._optimizer = BatchSizeOptimizer(self.spec, open_store(self.store))
        rec = trainer.strategy.broadcast(self._optimizer.next_batch_size() if self._optimizer else None, src=0)
        assert rec is not None
        self.recommendation, self._open = rec, True
        lightning_setattr(pl_module, self.batch_size_attr, rec.batch_size)
        self._energy.batch_size = rec.batch_size
        steer_for_recurring_run(self._energy.config, self._energy.session, power_limit_w=rec.power_limit_w,
                                    batch_size=rec.batch_size, eta=self.spec.eta)
        limit = f"capped at {rec.power_limit_w:g} W" if rec.power_limit_w is not None else "tuned in this run"
        rank_zero_info(f"wattwise: job {self.spec.name!r} run {rec.run_id}: batch size {rec.batch_size} "
                       f"({rec.phase}), power limit {limit}")

    def _check_batch_size_attr(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # As BatchSizeFinder: a batch size set on the module never reaches dataloaders given to `fit`.
        if not trainer.fit_loop._data_source.is_module():
            raise UsageError("RecurringBatchSizeCallback sets the batch size on the LightningModule or "
                             "LightningDataModule; dataloaders passed to `fit()` ignore it. Build them in "
                             "`train_dataloader()` from the module's or datamodule's batch size.")
        if not lightning_hasattr(pl_module, self.batch_size_attr):
            raise UsageError(f"field {self.batch_size_attr!r} not found in the model, the datamodule, nor their "
                             f"`hparams`; add it, or name the field with batch_size_attr=")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._open:
            return
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise UsageError(f"RecurringBatchSizeCallback monitors {self.monitor!r}, which validation did not "
                             f"log; logged metrics: {sorted(trainer.callback_metrics)}")
        self._metric = float(value)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Validation at the end of an epoch runs before this hook, so the metric is the epoch's own."""
        if not self._open or self.recommendation is None:
            return
        assert self._energy is not None and self._energy.session is not None  # made in its `setup("fit")`
        totals = self._energy.session.totals()  # a collective: every rank calls it
        if totals is None:  # measurement is off (the EnergyCallback warned): nothing to price the run with
            return
        self._epochs += 1
        reason = None
        if self._optimizer is not None:
            reason = self._optimizer.stop_reason(self.recommendation.run_id, self._epochs, totals.energy_j,
                                                 totals.time_s, self._metric)
        reason = trainer.strategy.broadcast(reason, src=0)
        if reason is not None:
            rank_zero_info(f"wattwise: run {self.recommendation.run_id} stops after {self._epochs} epochs: {reason}")
            trainer.should_stop = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """After every callback's `on_fit_end`, so the EnergyCallback's summary is there."""
        if stage == "fit":
            self._record(failed=False)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._record(failed=True)

    def _record(self, *, failed: bool) -> None:
        """Close the run in the store: reached or not, with the EnergyCallback's energy and time."""
        rec, energy_cb = self.recommendation, self._energy
        if not self._open or rec is None or energy_cb is None:
            return
        self._open = False
        figures = _run_figures(energy_cb)  # every rank: may be a collective
        optimizer, self._optimizer = self._optimizer, None
        if optimizer is None:
            return
        try:
            tuner = energy_cb.session.tuner if energy_cb.session is not None else None
            if rec.power_limit_w is None and tuner is not None and tuner.chosen is not None:
                optimizer.record_power_limit(rec.batch_size, tuner.chosen.power_limit_w)
            if figures is None:
                warnings.warn(f"wattwise: no energy was measured, so run {rec.run_id} of job {self.spec.name!r} "
                              f"is left open; it stops counting as running after 24 hours", EnergyPluginWarning,
                              stacklevel=2)
                return
            energy_j, time_s = figures
            self.result = optimizer.report_result(rec.run_id, energy_j=energy_j, time_s=time_s,
                                                  reached=not failed and self.spec.reached(self._metric),
                                                  epochs=self._epochs)
        finally:
            optimizer.store.close()


def _energy_callback(trainer: pl.Trainer) -> EnergyCallback:
    found = [cb for cb in trainer.callbacks if isinstance(cb, EnergyCallback)]  # type: ignore[attr-defined]
    if len(found) != 1:
        raise UsageError(
            f"RecurringBatchSizeCallback needs exactly one EnergyCallback in the same Trainer (found {len(found)}): "
            "it measures the energy each run is priced with and applies the power limit, e.g. "
            "Trainer(callbacks=[EnergyCallback(), RecurringBatchSizeCallback(...)])"
        )
    return found[0]


def _run_figures(energy_cb: EnergyCallback) -> tuple[float, float] | None:
    """The run's energy (J) and time (s): the EnergyCallback's summary once fit ended, else the totals so far."""
    if energy_cb.summary is not None:
        return float(energy_cb.summary["energy_j"]), float(energy_cb.summary["time_s"])
    totals = energy_cb.session.totals() if energy_cb.session is not None else None
    return (totals.energy_j, totals.time_s) if totals is not None else None
