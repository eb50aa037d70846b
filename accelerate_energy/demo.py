"""The Accelerate runner of `wattwise demo`: the emulated workload in a plain Accelerate loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from accelerate_energy.adapter import AccelerateEnergy
from wattwise.config import load_config
from wattwise.run import Run
from wattwise.tools.demo import DemoOptions, tuned_and_baseline
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model


def _batches(loader: torch.utils.data.DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def _train(overrides: list[str], steps: int, stop: Callable[[Run], bool] | None = None) -> dict[str, Any]:
    """At most `steps` optimizer steps of the tiny model, each lasting the simulated GPU's modelled step time.

    The loop ends early after the step at which `stop(run)` says so.
    """
    accelerator = Accelerator(cpu=True)
    energy = AccelerateEnergy(accelerator, load_config(overrides=overrides), print_summary=False)
    energy.install()
    torch.manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = torch.utils.data.DataLoader(tiny_dataset(4096), batch_size=32, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    gpus = energy.run.gpus
    batches = _batches(loader)
    for _ in range(steps):
        x, y = next(batches)
        # Forward and backward run as one emulated GPU step; the optimizer step ends it.
        emulate_step(gpus, lambda: accelerator.backward(nn.functional.mse_loss(model(x), y)))  # noqa: B023
        optimizer.step()
        optimizer.zero_grad()
        if stop is not None and stop(energy.run):
            break
    accelerator.end_training()
    if energy.summary is None:
        raise RuntimeError("the energy run produced no summary; see the warnings above")
    return energy.summary


def run_demo(options: DemoOptions) -> dict[str, Any]:
    """Train with power-limit tuning, then the same steps at the maximum limit; compare."""
    return tuned_and_baseline(options, "accelerate", _train)
