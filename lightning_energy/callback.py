"""`EnergyCallback`: energy of every step, epoch and fit, and optional power-limit tuning or capping.

A thin adapter: it forwards Lightning's hooks to one `wattwise.run.Run` per `fit`, logs through the
trainer's loggers and keeps the run's state in checkpoints.

- **A step is an optimizer step**, Lightning's `trainer.global_step`: a training batch that ends without
  an optimizer step (gradient accumulation) is part of the next step; with manual optimization and
  several optimizers each `optimizer.step()` counts, as in `global_step`. Power-limit changes happen only
  at the start of a batch that begins a new step.
- Step figures are combined over processes and logged every `log_every_n_steps` steps (the Trainer's own
  cadence unless set); other steps only count.
- Epoch figures are logged at the epoch's last step, combined over processes at the next exchange of
  figures (the next logging point, or the fit's end): where the energy counter changes only every so
  often (NVML's about every 0.1 s), it is read at the epoch's end in the background, so training does not
  wait for the read. An `EarlyStopping` or `ModelCheckpoint` whose `monitor` is an epoch figure
  (`energy/epoch_j`, ...) gets it at the epoch's end instead, each epoch then ending with a read and an
  exchange of its own.
- Validation (the sanity check included) and checkpoint saving are not training: they are paused out of
  step figures and power-limit profiles until the next training batch, and reported apart in the summary.
- Each `fit` has its own run and summary: the first writes to `output_dir`, the k-th to
  `output_dir/fit-k`; `summaries` lists them. A mid-epoch resume records the resumed epoch whole.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from wattwise.config import EnergyConfig, arguments_config, refuse_positional
from wattwise.devices.base import Device
from wattwise.record.summary import format_summary
from wattwise.run import Run
from wattwise.run.logged import EPOCH_METRICS, epoch_metrics, fit_metrics, simulated, step_metrics
from wattwise.run.measurement import Figures
from wattwise.vocabulary import Framework, RunStatus

log = logging.getLogger(__name__)
#: Where a run writes when `output_dir` is not set and the Trainer has no logger folder to follow.
DEFAULT_OUTPUT_DIR = EnergyConfig().output_dir


class EnergyCallback(Callback):
    """Measure energy in Lightning and optionally tune or cap the GPU power limit.

    The keyword arguments are `wattwise.config.SETTINGS` (each sets one key of `EnergyConfig`), plus the
    two ways to reach every other key, `config` and `overrides`, and `devices`.

    Args:
        mode: "measure" (default), "tune" (profile power limits in the first steps and keep the best)
            or "cap" (a fixed power cap).
        selector: tuning objective: "cost" (Zeus: eta*E + (1-eta)*MaxPower*T), "energy", "time" or
            "slowdown" (least energy within `max_slowdown`).
        eta: weight of energy against time in the cost, in [0, 1].
        max_slowdown: largest step-time increase accepted by selector "slowdown" (0.1 = 10%).
        cap_w: the cap of mode "cap", in watts.
        cap_fraction: the cap of mode "cap" as a fraction of the maximum limit (give one of the two).
        job: a name for this training job; a tuned limit is saved under it and reused next time.
        output_dir: where summary.json, windows.csv and power.csv are written at the end of fit.
        strict: raise instead of degrading to measurement only when a setting cannot be applied.
        backend: "auto", "nvml", "amdsmi", "simulated" or "agent".
        log_every_n_steps: log step metrics every N steps; None: the Trainer's own `log_every_n_steps`.
        config: an OmegaConf YAML (see `configs/energy.yaml`) with any other setting.
        overrides: dotlist overrides applied last: a list, e.g. ["power_limit.profile_steps=10"], or one
            string of them separated by spaces, as `LIGHTNING_ENERGY_OVERRIDES` takes them.
        devices: devices to use instead of discovering them (tests, custom setups).

    Arguments left as None take their value from `config`, then from the defaults. Every argument is
    given by name; a value of the wrong type, or a cap in a mode other than "cap", is a
    `wattwise.errors.ConfigError` naming the argument (`wattwise.config.arguments_config`).
    """

    def __init__(
        self,
        *args: Any,
        mode: str | None = None,
        selector: str | None = None,
        eta: float | None = None,
        max_slowdown: float | None = None,
        cap_w: float | None = None,
        cap_fraction: float | None = None,
        job: str | None = None,
        output_dir: str | None = None,
        strict: bool | None = None,
        backend: str | None = None,
        log_every_n_steps: int | None = None,
        config: str | None = None,
        overrides: str | list[str] | None = None,
        devices: list[Device] | None = None,
    ) -> None:
        super().__init__()
        refuse_positional(type(self).__name__, args)
        given = {
            "mode": mode,
            "selector": selector,
            "eta": eta,
            "max_slowdown": max_slowdown,
            "cap_w": cap_w,
            "cap_fraction": cap_fraction,
            "job": job,
            "output_dir": output_dir,
            "strict": strict,
            "backend": backend,
            "log_every_n_steps": log_every_n_steps,
        }
        # Validated here, so a bad argument fails when the Trainer is built, not hours later.
        self.config: EnergyConfig = arguments_config(type(self).__name__, given, config=config, overrides=overrides)
        self._devices = devices
        #: The current (or last) fit's run (made at `setup("fit")`, or earlier by `RecurringBatchSizeCallback`).
        self.run: Run | None = None
        #: Every fit's run, in order.
        self.runs: list[Run] = []
        self._global_step = 0
        self._in_step = False
        #: Whether epoch figures come at the next exchange of figures (no callback monitors one at the epoch's end).
        self._defer_epochs = False
        #: The Trainer's `global_step` at the end of each ended epoch whose figures are still to come.
        self._epoch_steps: dict[int, int] = {}
        self._state_key: tuple[str | None, str] | None = None
        #: The Trainer's folder this fit's run writes under (None: `output_dir`, as configured).
        self._followed: str | None = None

    @override
    def __repr__(self) -> str:
        """The settings that say what this callback does: `EnergyCallback(mode='tune', eta=0.5, ...)`."""
        return self.config.described_as(type(self).__name__)

    @property
    @override
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint, one per job name (built once per job name)."""
        # Lightning reads it on every hook call (six per training step, for its profiler's labels): built
        # once per job name, not each time.
        job = self.config.job
        if self._state_key is None or self._state_key[0] != job:
            self._state_key = (job, self._generate_state_key(job=job))
        return self._state_key[1]

    @property
    def summary(self) -> dict[str, Any] | None:
        """The last fit's summary once it ended (every process), else None."""
        return self.run.summary if self.run is not None else None

    @property
    def summaries(self) -> list[dict[str, Any]]:
        """The summary of every fit that ended, in order."""
        return [r.summary for r in self.runs if r.summary is not None]

    def run_for_fit(self, trainer: pl.Trainer | None = None) -> Run:
        """This fit's run, made on first use (at `setup("fit")`, or when a checkpoint's state comes first).

        A fit after one that finished gets a new run, writing to `output_dir/fit-k`.
        """
        if self.run is None or self.run.finished:
            cfg = copy.deepcopy(self.config)  # a run may steer its own settings (a recurring job's limit)
            under = self._trainer_folder(trainer)
            if under is not None:
                cfg = dataclasses.replace(cfg, output_dir=under)
            if self.runs:
                cfg = dataclasses.replace(cfg, output_dir=os.path.join(cfg.output_dir, f"fit-{len(self.runs) + 1}"))
            self.run = Run(
                cfg,
                framework=Framework.LIGHTNING,
                devices=self._devices,
                local_rank=trainer.local_rank if trainer is not None else None,
            )
            self.runs.append(self.run)
        return self.run

    def _trainer_folder(self, trainer: pl.Trainer | None) -> str | None:
        """`<trainer.log_dir>/wattwise` when the Trainer has a logger with a folder and `output_dir` was not set.

        Where a Lightning user looks for a run's files (beside the logger's metrics and checkpoints). A
        collective under DDP (`log_dir` broadcasts rank 0's): every process calls it at `setup("fit")`.
        """
        self._followed = None
        if trainer is None or self.config.output_dir != DEFAULT_OUTPUT_DIR or not trainer.loggers:
            return None
        log_dir = trainer.log_dir
        if not log_dir:
            return None
        self._followed = os.path.join(log_dir, "wattwise")
        return self._followed

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """At `setup("fit")`: make the fit's `Run` (see `run_for_fit`)."""
        if stage == "fit":
            self.run_for_fit(trainer)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Start the run: its logging cadence, the steps the fit is expected to last, devices and settings."""
        run = self.run
        if run is None:
            return
        run.log_every_n_steps = self.config.log_every_n_steps or getattr(trainer, "log_every_n_steps", None) or 50
        if pl_module.automatic_optimization:  # else Lightning's estimate counts batches, not optimizer steps
            total = trainer.estimated_stepping_batches
            run.expect_steps(int(total) if isinstance(total, int | float) and math.isfinite(total) else None)
        run.start()
        if self._followed is not None and run.measurement is not None:
            run.measurement.notes.append(
                f"written under the Trainer's log_dir, in {run.cfg.output_dir} (EnergyCallback(output_dir=...) "
                "writes elsewhere)"
            )

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Take Lightning's step counter as it is after a resume."""
        # After a resume, Lightning restores `global_step` between `on_fit_start` and here.
        self._global_step, self._in_step = trainer.global_step, False
        watched = {cb.monitor for cb in trainer.early_stopping_callbacks} | {
            cb.monitor for cb in trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)
        }
        self._defer_epochs = not watched & EPOCH_METRICS
        self._epoch_steps = {}

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Begin measuring the epoch."""
        if self.run is not None:
            self.run.epoch_begin(trainer.current_epoch)

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        """Begin an optimizer step at its first batch; resume measuring after a validation or checkpoint pause."""
        if self.run is None:
            return
        if not self._in_step:  # the first batch of an optimizer step
            self._in_step = True
            self.run.step_begin(trainer.current_epoch)
        elif self.run.paused:  # training goes on inside a step, after a validation or a checkpoint
            self.run.resume()

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """End the optimizer step once `global_step` moves; log the step figures at the logging cadence."""
        run = self.run
        if run is None:
            return
        global_step = trainer.global_step  # a chain of Lightning properties: read once per batch
        steps = global_step - self._global_step
        if steps <= 0:  # a gradient-accumulation batch: the step goes on
            return
        self._global_step, self._in_step = global_step, False
        rec = run.step_end(steps)
        if self._epoch_steps:
            self._log_ended_epochs(trainer)
        if rec is None or not trainer.is_global_zero:
            return
        # Straight to the loggers, at the trainer's cadence: the figures are already combined over
        # processes, and `LightningModule.log` would cost more per step than the measurement itself.
        metrics = step_metrics(rec, run.power_limit_w, simulated=simulated(run))
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=global_step)

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Pause step figures and profiles: validation is not training."""
        if self.run is not None and trainer.state.fn == "fit":
            self.run.pause("validation")

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Pause step figures and profiles: saving a checkpoint is not training."""
        if self.run is not None and self.run.started:
            self.run.pause("checkpoint")

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """End the epoch and log its energy, time and average power."""
        if self.run is None:
            return
        if self.run.measuring:
            self._epoch_steps[trainer.current_epoch] = trainer.global_step
        rec = self.run.epoch_end(defer=self._defer_epochs)
        if rec is not None:
            self._epoch_steps.pop(trainer.current_epoch, None)
            self._log_epoch(trainer, trainer.current_epoch, rec, trainer.global_step)
        self._log_ended_epochs(trainer)

    def _log_ended_epochs(self, trainer: pl.Trainer) -> None:
        """Log the epochs whose figures came since they ended, each at its own last step."""
        assert self.run is not None
        for ended in self.run.take_ended_epochs():
            step = self._epoch_steps.pop(ended.epoch, trainer.global_step)
            self._log_epoch(trainer, ended.epoch, ended.figures, step)

    def _log_epoch(self, trainer: pl.Trainer, epoch: int, rec: Figures, step: int) -> None:
        """One epoch's figures to the loggers (rank 0) and to the metrics callbacks read (`monitor`)."""
        assert self.run is not None
        # Already combined over processes, so the same on every rank: straight to the loggers, as the step
        # figures go. `LightningModule.log_dict(sync_dist=True)` cost milliseconds and one all-reduce per
        # metric at each epoch's end, which short epochs paid at every few steps.
        metrics = epoch_metrics(rec, simulated=simulated(self.run))
        trainer.callback_metrics.update({k: torch.tensor(v) for k, v in metrics.items()})
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({**metrics, "epoch": epoch}, step=step)

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Restore every GPU setting and write the summary of a failed fit.

        The status is `interrupted` for Ctrl-C and for the `SIGTERMException` Lightning raises after a
        SIGTERM (a preemption), `failed` otherwise. Under distributed training the processes may no longer
        meet (one died, or another is inside a collective of Lightning's own signal handling): the run
        ends without a collective (`Run.finish_alone`).
        """
        if self.run is not None:
            self.run.abort(exception)
            stopped = isinstance(exception, KeyboardInterrupt | SIGTERMException)
            if self.run.collective.world_size > 1:
                self.run.finish_alone(RunStatus.INTERRUPTED if stopped else RunStatus.FAILED, exception)
            self._finish(trainer, RunStatus.INTERRUPTED if stopped else RunStatus.FAILED)

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Restore every GPU setting, write the summary and print the report."""
        self._finish(trainer, RunStatus.COMPLETED)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Finish a fit that ended without `on_fit_end` (interrupted) the same way."""
        if stage == "fit":
            self._finish(trainer, RunStatus.INTERRUPTED if trainer.interrupted else RunStatus.COMPLETED)

    def _finish(self, trainer: pl.Trainer, status: RunStatus) -> None:
        if self.run is None or self.run.finished:
            return
        record = self.run.finish(status)
        self._log_ended_epochs(trainer)
        self._epoch_steps.clear()
        if record is None:
            return
        for logger in trainer.loggers:
            logger.log_metrics(fit_metrics(record), step=trainer.global_step)
        rank_zero_info(format_summary(record, output_dir=self.run.cfg.output_dir))

    @override
    def state_dict(self) -> dict[str, Any]:
        """The run's state for the checkpoint (energy and time so far, steps, the tuning state and choice)."""
        return self.run.state_dict() if self.run is not None else {}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the run from a checkpoint's state: counting goes on, tuning is not repeated."""
        if state_dict:
            self.run_for_fit().load_state_dict(state_dict)
