"""The training check of `wattwise acceptance` (entry point `wattwise.acceptance:lightning`).

A small transformer language model on synthetic tokens, CUDA and bf16, trained under Lightning with
`EnergyCallback` on a real GPU. wattwise itself never imports Lightning, so this part lives here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from typing_extensions import override

from wattwise.devices.base import Device

#: A model that keeps an H100 busy (about 30-40 ms a step in bf16), so the power limit matters to it.
VOCAB, WIDTH, LAYERS, SEQ, BATCH = 8192, 1024, 8, 512, 32
#: Steps trained at the chosen limit once tuning is done, before the tune fit stops.
STEPS_AFTER_TUNING = 100


def training_check(gpu: Device, out: Path, *, quick: bool) -> dict[str, Any]:
    """Tune on a real GPU and measure the hot-path overhead of measure mode against no callback.

    Args:
        gpu: The GPU under test (NVML or amdsmi backend).
        out: Folder for the two runs' summaries.
        quick: Shorter profile windows and overhead fits.

    Returns:
        The chosen limit, the profile, the saving against the maximum limit measured in the same run, the
        steps each profile window held, and the overhead figures.
    """
    import lightning.pytorch as pl
    import torch

    from lightning_energy.callback import EnergyCallback

    cuda_index = int(getattr(gpu, "cuda_index", gpu.index))

    class TinyLM(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, WIDTH)
            layer = torch.nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, batch_first=True)
            self.body = torch.nn.TransformerEncoder(layer, LAYERS)
            self.head = torch.nn.Linear(WIDTH, VOCAB)

        @override
        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            tokens = batch[0]  # the one tensor of a TensorDataset
            logits = self.head(self.body(self.embed(tokens[:, :-1])))
            return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

        @override
        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

        @override
        def train_dataloader(self) -> Any:
            tokens = torch.randint(0, VOCAB, (BATCH * 64, SEQ + 1), generator=torch.Generator().manual_seed(0))
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=BATCH, shuffle=True)

    def fit(steps: int, callbacks: list[pl.Callback]) -> float:
        torch.manual_seed(0)
        trainer = pl.Trainer(
            accelerator="gpu",
            devices=[cuda_index],
            precision="bf16-mixed",
            max_steps=steps,
            max_epochs=-1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=callbacks,
        )
        start = time.perf_counter()
        trainer.fit(TinyLM())
        return time.perf_counter() - start

    rng = gpu.power_limit_range()
    step_w = max(1.0, round((rng.max_w - rng.min_w) / 4))
    # Each profile window lasts at least 20 updates of the energy counter (`power_limit.min_profile_s` left
    # to its default), so the tune fit runs until tuning is done and then STEPS_AFTER_TUNING more steps.
    tune = EnergyCallback(
        mode="tune",
        backend=gpu.backend,
        output_dir=str(out / "training_tune"),
        devices=[gpu],
        overrides=[
            "power_limit.wait_steps=5",
            "power_limit.warmup_steps=3",
            f"power_limit.profile_steps={5 if quick else 15}",
            f"power_limit.step_w={step_w}",
            "power_limit.reuse=false",
        ],
    )

    class StopAfterTuning(pl.Callback):
        @override
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            run = tune.run
            if run is not None and run.power.tuner is not None and run.power.steps_at_chosen >= STEPS_AFTER_TUNING:
                trainer.should_stop = True

    fit(20_000, [tune, StopAfterTuning()])
    summary = tune.summary or {}
    limit = summary.get("power_limit") or {}
    overhead_steps = 100 if quick else 300
    plain_s = fit(overhead_steps, [])
    measured = EnergyCallback(
        mode="measure", backend=gpu.backend, output_dir=str(out / "training_measure"), devices=[gpu]
    )
    measured_s = fit(overhead_steps, [measured])
    return {
        "steps": summary.get("steps"),
        "energy_j": summary.get("energy_j"),
        "time_s": summary.get("time_s"),
        "chosen_power_limit_w": limit.get("chosen_power_limit_w"),
        "profile": limit.get("profile"),
        "tuning": limit.get("tuning"),
        "energy_saved_j": limit.get("energy_saved_j"),
        "profile_window_steps": tune.run.power.tuner.profile_steps if tune.run and tune.run.power.tuner else None,
        "measure_overhead_pct": (measured_s / plain_s - 1) * 100 if plain_s > 0 else None,
        "overhead_fits_s": {"without": plain_s, "measure": measured_s, "steps": overhead_steps},
    }
