"""`PipelineFrequencyCallback`: run a pipeline stage at the frequencies of a Perseus-style plan."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_energy.callback import EnergyCallback
from wattwise.devices.base import Device
from wattwise.frequency.controller import FrequencyController, follow_plan


class PipelineFrequencyCallback(Callback):
    """Follow a frequency plan (PLAN.json from `wattwise plan`) on this process's pipeline stage.

    The LightningModule exposes its `torch.distributed.pipelining` stage as the attribute named
    `stage_attr` (default `pipeline_stage`); the stage's `stage_index` selects the plan's row. The GPU is
    this process's own (its local rank), or `device` if given. Clocks are reset when fit ends, fails or
    the process is signalled.
    """

    def __init__(
        self,
        plan: str,
        stage_attr: str = "pipeline_stage",
        backend: str = "auto",
        strict: bool = False,
        device: Device | None = None,
    ) -> None:
        super().__init__()
        self.plan_path = plan
        self.stage_attr = stage_attr
        self.backend = backend
        self.strict = strict
        self._device = device
        self.controller: FrequencyController | None = None
        self._detach: Any = None

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Start following the plan on the module's pipeline stage; refused before training if it cannot be.

        Raises:
            AttributeError: the LightningModule has no attribute `stage_attr`.
        """
        stage = getattr(pl_module, self.stage_attr, None)
        if stage is None:
            raise AttributeError(
                f"PipelineFrequencyCallback: the LightningModule has no `{self.stage_attr}` "
                "attribute holding its torch.distributed.pipelining stage"
            )
        runs = [cb.run for cb in trainer.callbacks if isinstance(cb, EnergyCallback)]  # type: ignore[attr-defined]
        self.controller, self._detach = follow_plan(
            stage,
            self.plan_path,
            local_rank=trainer.local_rank,
            backend=self.backend,
            strict=self.strict,
            device=self._device,
            run=runs[0] if runs else None,
        )

    def _close(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None
        if self.controller is not None:
            self.controller.close()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Stop following the plan; the settings guard resets the clocks."""
        self._close()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Stop following the plan at the end of fit; the settings guard resets the clocks."""
        if stage == "fit":
            self._close()
