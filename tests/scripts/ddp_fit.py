"""A two-process DDP fit on the CPU (gloo) with EnergyCallback tuning simulated GPUs.

Run by tests/integration/lightning_energy/test_lightning_ddp.py: `python ddp_fit.py OUTPUT_DIR [MODE]` (MODE:
tune, the default, or measure).
Lightning's DDP launcher starts the second process by running this script again.
"""

import sys

import lightning.pytorch as pl
import torch.distributed

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.workload import use_one_cpu_thread

if __name__ == "__main__":
    out = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "tune"
    use_one_cpu_thread()
    callback = EnergyCallback(
        mode=mode, backend="simulated", output_dir=out,
        overrides=["devices.simulated.base_step_time_s=0.01", "power_limit.wait_steps=1",
                   "power_limit.warmup_steps=1", "power_limit.profile_steps=2", "power_limit.step_w=100",
                   "monitor.sync_cuda=false"])
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=16, max_epochs=-1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0, callbacks=[callback])
    trainer.fit(EmulatedModule(dataset_size=1024))
    # Tear gloo down before interpreter exit: left to the C++ destructors it can abort the process.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
