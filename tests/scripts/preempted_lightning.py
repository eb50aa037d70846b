"""A plain Lightning script that is preempted: SIGTERM reaches it in the middle of training.

`python preempted_lightning.py MARKER_DIR`: the process sends itself SIGTERM after optimizer step 6, as
SLURM or Kubernetes would. Lightning's own handling then raises `SIGTERMException` at the next batch; the
user's callback writes `MARKER_DIR/on_exception` with the exception's name (where a real script checkpoints),
and the script exits 0. Run by tests/integration/lightning_energy/test_preemption.py with and without
`LIGHTNING_ENERGY=1`: the exit code and the callback must be the same.
"""

import os
import signal
import sys
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel


class Preempted(pl.Callback):
    """Sends SIGTERM to its own process after step 6; records the exception Lightning raises for it."""

    def __init__(self, marker_dir: str) -> None:
        self.marker_dir = Path(marker_dir)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 6:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_exception(self, trainer, pl_module, exception):
        (self.marker_dir / "on_exception").write_text(type(exception).__name__)


trainer = pl.Trainer(
    max_steps=200,
    limit_val_batches=0,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=[Preempted(sys.argv[1])],
)
trainer.fit(BoringModel())
print(f"global_step {trainer.global_step}")
