"""The Accelerate runner of `wattwise demo`: the emulated workload in a plain Accelerate loop."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from accelerate_energy.adapter import AccelerateEnergy
from wattwise.config import load_config
from wattwise.demo import DemoOptions, demo_overrides, demo_result
from wattwise.devices import PowerModel
from wattwise.power_limit import profile_limits_w
from wattwise.workload import emulate_step, tiny_dataset, tiny_model, use_one_cpu_thread


def _batches(loader: torch.utils.data.DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def _train(overrides: list[str], steps: int) -> dict[str, Any]:
    """`steps` optimizer steps of the tiny model, each lasting the simulated GPU's modelled step time."""
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
    accelerator.end_training()
    if energy.summary is None:
        raise RuntimeError("the energy run produced no summary; see the warnings above")
    return energy.summary


def run_demo(options: DemoOptions) -> dict[str, Any]:
    """Train with power-limit tuning, then the same steps at the maximum limit; compare."""
    model = PowerModel.from_csv(options.power_model) if options.power_model else PowerModel.default()
    lo, hi = model.limit_range_w
    steps = options.total_steps(len(profile_limits_w(lo, hi, options.step_w)))
    logging.getLogger("wattwise.measurement").setLevel(logging.ERROR)  # the demo's own report says "simulated"
    use_one_cpu_thread()
    with tempfile.TemporaryDirectory(prefix="wattwise-demo-") as tmp:
        common = demo_overrides(options, options.state_dir or tmp)
        tuned = _train([*common, "power_limit.mode=tune", f"output_dir={options.output_dir}"], steps)
        baseline = _train([*common, "power_limit.mode=measure",
                           f"output_dir={Path(options.output_dir) / 'baseline'}"], steps)
    return demo_result(options, "accelerate", tuned, baseline, model)
