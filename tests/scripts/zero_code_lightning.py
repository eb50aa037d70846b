"""A plain Lightning script with no wattwise line: Lightning's own `BoringModel`, trained on the CPU.

`--own-callback DIR` gives the Trainer its own `EnergyCallback` writing to DIR (the flag must then add
nothing).
"""

import sys

import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel

callbacks = []
if len(sys.argv) > 2 and sys.argv[1] == "--own-callback":
    from lightning_energy import EnergyCallback

    callbacks.append(EnergyCallback(output_dir=sys.argv[2]))

trainer = pl.Trainer(
    max_steps=12,
    limit_val_batches=2,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
    callbacks=callbacks,
)
trainer.fit(BoringModel())
print(f"global_step {trainer.global_step}")
