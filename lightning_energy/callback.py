"""`EnergyCallback`: energy of every step, epoch and fit, and optional power-limit tuning or capping.

A thin adapter: it maps Lightning's hooks onto `wattwise.session.EnergySession`, logs through the
trainer's loggers and keeps the session's state in checkpoints.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from wattwise.config import EnergyConfig, load_config
from wattwise.devices.base import Device
from wattwise.report_text import format_summary
from wattwise.session import EnergySession

log = logging.getLogger(__name__)


class EnergyCallback(Callback):
    """Measure energy in Lightning and optionally tune or cap the GPU power limit.

    Args:
        mode: "measure" (default), "tune" (profile power limits in the first steps and keep the best)
            or "cap" (a fixed power cap).
        selector: tuning objective: "cost" (Zeus: eta*E + (1-eta)*MaxPower*T), "energy", "time" or
            "slowdown" (least energy within `max_slowdown`).
        eta: weight of energy against time in the cost, in [0, 1].
        max_slowdown: largest step-time increase accepted by selector "slowdown" (0.1 = 10%).
        cap_w / cap_fraction: the cap of mode "cap", in watts or as a fraction of the maximum limit.
        job: a name for this training job; a tuned limit is saved under it and reused next time.
        output_dir: where summary.json, windows.csv and power.csv are written at the end of fit.
        strict: raise instead of degrading to measurement only when a setting cannot be applied.
        backend: "auto", "nvml" or "simulated".
        config: an OmegaConf YAML (see `configs/energy.yaml`) with any other setting.
        overrides: dotlist overrides applied last, e.g. ["power_limit.profile_steps=10"].
        devices: devices to use instead of discovering them (tests, custom setups).

    Arguments left as None take their value from `config`, then from the defaults.
    """

    def __init__(
        self,
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
        config: str | None = None,
        overrides: list[str] | None = None,
        devices: list[Device] | None = None,
    ) -> None:
        super().__init__()
        power_limit = {k: v for k, v in {"mode": mode, "selector": selector, "eta": eta,
                                         "max_slowdown": max_slowdown, "cap_w": cap_w,
                                         "cap_fraction": cap_fraction}.items() if v is not None}
        values: dict[str, Any] = {k: v for k, v in {"job": job, "output_dir": output_dir,
                                                    "strict": strict}.items() if v is not None}
        if power_limit:
            values["power_limit"] = power_limit
        if backend is not None:
            values["devices"] = {"backend": backend}
        # Validated here, so a bad argument fails when the Trainer is built, not hours later.
        self.config: EnergyConfig = load_config([config] if config else [], overrides or [], values)
        self._devices = devices
        self.session: EnergySession | None = None
        self._pending_state: dict[str, Any] | None = None
        self.summary: dict[str, Any] | None = None
        #: The run's batch size, for the summary (set by `RecurringBatchSizeCallback`).
        self.batch_size: int | None = None

    @property
    def state_key(self) -> str:
        return self._generate_state_key(job=self.config.job)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or self.session is not None:
            return
        self.session = EnergySession(self.config, framework="lightning", devices=self._devices,
                                     local_rank=trainer.local_rank, batch_size=self.batch_size)
        if self._pending_state is not None:
            self.session.load_state_dict(self._pending_state)
            self._pending_state = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.session is not None:
            self.session.start()

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.session is not None:
            self.session.epoch_begin()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self.session is not None:
            self.session.step_begin()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if self.session is None:
            return
        rec = self.session.step_end()
        every: int = self.config.log_every_n_steps or getattr(trainer, "log_every_n_steps", None) or 50
        if rec is None or self.session.step_count % every or not trainer.is_global_zero:
            return
        metrics = {"energy/step_j": rec.energy_j, "time/step_s": rec.time_s, "power/avg_w": rec.avg_power_w}
        if self.session.applied_limit_w is not None:
            metrics["power/limit_w"] = self.session.applied_limit_w
        # Straight to the loggers, at the trainer's cadence: the figures are already combined over
        # processes, and `LightningModule.log` would cost more per step than the measurement itself.
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.session is None:
            return
        rec = self.session.epoch_end()
        if rec is not None:
            pl_module.log_dict({"energy/epoch_j": rec.energy_j, "time/epoch_s": rec.time_s,
                                "power/epoch_avg_w": rec.avg_power_w}, on_step=False, on_epoch=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if self.session is not None:
            self.session.abort(exception)
            self._finish(trainer, "failed")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, "completed")

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._finish(trainer, "interrupted" if trainer.interrupted else "completed")

    def _finish(self, trainer: pl.Trainer, status: str) -> None:
        if self.session is None or self.session.finished:
            return
        summary = self.session.finish(status)
        if summary is None:
            return
        self.summary = summary
        for logger in trainer.loggers:
            logger.log_metrics({"energy/fit_j": summary["energy_j"], "time/fit_s": summary["time_s"]},
                               step=trainer.global_step)
        rank_zero_info(format_summary(summary, output_dir=self.config.output_dir))

    def state_dict(self) -> dict[str, Any]:
        return self.session.state_dict() if self.session is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict:
            return
        if self.session is not None:
            self.session.load_state_dict(state_dict)
        else:
            self._pending_state = state_dict
