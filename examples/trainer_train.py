"""A Hugging Face `Trainer` script that wattwise measures with no line of its own: run it with the flag.

    ACCELERATE_ENERGY=1 ACCELERATE_ENERGY_MODE=tune python examples/trainer_train.py

`transformers.Trainer` builds its own `Accelerator`; with `ACCELERATE_ENERGY=1` wattwise attaches to it,
counts the Trainer's optimizer steps and writes `summary.json` (to `ACCELERATE_ENERGY_OUTPUT_DIR`, default
`wattwise_runs`). The model is a tiny regression built here (nothing is downloaded). On the simulated GPU
(`WATTWISE_BACKEND=simulated`) each step lasts the modelled time (`emulate_step`), so tuning has something
to tune; on a real GPU it just runs the step.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

import accelerate_energy
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model


class Regression(nn.Module):
    """A tiny model in the Trainer's shape: keyword inputs in, a dict with the loss out."""

    def __init__(self) -> None:
        super().__init__()
        self.model = tiny_model()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": nn.functional.mse_loss(self.model(x), labels)}


class Samples(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """The tiny dataset as the dicts a Trainer feeds its model."""

    def __init__(self, n: int) -> None:
        self.data = tiny_dataset(n)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x, y = self.data[i]
        return {"x": x, "labels": y}


class EmulatedTrainer(Trainer):
    """A Trainer whose steps last the simulated GPU's modelled time (no change on a real GPU)."""

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        run = accelerate_energy.energy_run(self.accelerator)
        return emulate_step(
            run.gpus if run is not None else [], lambda: super(EmulatedTrainer, self).training_step(*args, **kwargs)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=120)
    steps = parser.parse_args().max_steps
    args = TrainingArguments(
        output_dir="trainer_out",
        max_steps=steps,
        per_device_train_batch_size=32,
        learning_rate=0.05,
        report_to=[],
        save_strategy="no",
        logging_steps=40,
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=True,
    )
    EmulatedTrainer(model=Regression(), args=args, train_dataset=Samples(2048)).train()


if __name__ == "__main__":
    main()
