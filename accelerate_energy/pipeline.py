"""Following a Perseus-style frequency plan on a pipeline stage in an Accelerate script."""

from __future__ import annotations

from typing import Any

from accelerate import Accelerator

from accelerate_energy.adapter import energy_run
from wattwise.devices.base import Device
from wattwise.frequency.controller import FrequencyController, follow_plan


def follow_frequency_plan(
    accelerator: Accelerator,
    stage: Any,
    plan: str,
    *,
    backend: str = "auto",
    strict: bool = False,
    device: Device | None = None,
) -> FrequencyController:
    """Run `stage` (a `torch.distributed.pipelining` stage) at the frequencies PLAN.json gives its index.

        controller = accelerate_energy.follow_frequency_plan(accelerator, stage, "plan.json")

    The GPU is this process's own (`accelerator.local_process_index`) unless `device` is given. Clocks are
    reset at `accelerator.end_training()`, at interpreter exit and on SIGTERM/SIGINT.
    """
    controller, detach = follow_plan(
        stage,
        plan,
        local_rank=accelerator.local_process_index,
        backend=backend,
        strict=strict,
        device=device,
        run=energy_run(accelerator),
    )
    end_training = accelerator.end_training

    def end_training_and_reset() -> None:
        detach()
        controller.close()
        end_training()

    accelerator.end_training = end_training_and_reset
    return controller
