"""A plain Accelerate training script with wattwise's one line (`accelerate_energy.attach`).

    ACCELERATE_ENERGY=1 ACCELERATE_ENERGY_MODE=tune \\
        accelerate launch --multi_gpu --num_processes 2 examples/accelerate_train.py

Without `ACCELERATE_ENERGY=1` the script trains exactly as it would without wattwise. Without a GPU the
`Accelerator` runs on the CPU (two processes over gloo under `--multi_gpu`) and wattwise measures only
what is there (the CPU through RAPL, or nothing); with `ACCELERATE_ENERGY_BACKEND=simulated` (or
`WATTWISE_BACKEND=simulated`) it uses one simulated GPU per process instead, and each step then lasts
the simulated GPU's modelled step time (`emulate_step`), so that power-limit tuning has something to
tune. On real GPUs `emulate_step` just runs the step.
"""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

import accelerate_energy
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dataset-size", type=int, default=4096, help="samples, split over the processes")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--gradient-accumulation-steps", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    set_seed(0)
    accelerator = accelerate_energy.attach(
        Accelerator(cpu=not torch.cuda.is_available(), gradient_accumulation_steps=args.gradient_accumulation_steps)
    )
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loader = torch.utils.data.DataLoader(tiny_dataset(args.dataset_size), batch_size=args.batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    # The devices a step runs on, for the emulation only: simulated GPUs when wattwise is asked for them.
    energy = accelerate_energy.energy_run(accelerator)
    gpus = energy.gpus if energy is not None else []

    for epoch in range(args.epochs):
        model.train()
        total, batches = 0.0, 0
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = emulate_step(gpus, lambda: _forward_backward(accelerator, model, x, y))  # noqa: B023
                optimizer.step()
                optimizer.zero_grad()
            total, batches = total + loss, batches + 1
        mean = accelerator.reduce(torch.tensor(total / batches, device=accelerator.device), "mean")
        accelerator.print(f"epoch {epoch}: loss {mean.item():.6f}")
        accelerate_energy.epoch_end(accelerator)  # optional: energy per epoch in the summary
    accelerator.wait_for_everyone()  # every process done before the process group is torn down
    accelerator.end_training()


def _forward_backward(accelerator: Accelerator, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    loss = nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    return float(loss.detach())


if __name__ == "__main__":
    main()
