"""The Lightning Trainer the callback benchmarks time: one CPU process, `steps` steps, nothing but `callbacks`.

No logger, checkpoints, progress bar, model summary or validation: what a fit costs beside its steps is
the callbacks'.
"""

from __future__ import annotations

import lightning.pytorch as pl


def cpu_trainer(steps: int, callbacks: list[pl.Callback]) -> pl.Trainer:
    """A Trainer that fits `steps` steps on the CPU with `callbacks` only."""
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=callbacks,
    )
