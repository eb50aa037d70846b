"""Two-process DDP fits (CPU, gloo) tuning simulated GPUs, where one process cannot change its GPU.

`python ranks_differ.py HOME OUTPUT_DIR FAULT [FAULT ...]`, HOME being the WATTWISE_HOME. One fit per FAULT,
one after the other in the same two processes (Lightning's DDP launcher runs this script again for rank 1,
with LOCAL_RANK=1; the later fits reuse the process group), each with its own simulated GPUs
(HOME/FAULT/simulated) and output folder (OUTPUT_DIR/FAULT). FAULT is what differs in the process of rank 1
(rank_faults.py lists them).

Rank 0 writes `--- FAULT` to stderr before each fit, so the test can tell whose warnings are whose. Run by
tests/integration/lightning_energy/test_ranks_agree.py: training must go on, exit 0, with one warning each.
"""

import os
import signal
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch.distributed
from rank_faults import make_rank_differ  # beside this script

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.tools.workload import use_one_cpu_thread


class Preempted(pl.Callback):
    """Rank 0 sends SIGTERM to the whole process group after optimizer step 6."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step == 6 and trainer.global_rank == 0 and not getattr(self, "sent", False):
            self.sent = True
            os.killpg(os.getpgid(0), signal.SIGTERM)


def fit(home: Path, out: Path, fault: str) -> None:
    """One tuned DDP fit with `fault` on rank 1; prints `FAULT rank R global_step N` on each rank."""
    rank1 = os.environ.get("LOCAL_RANK") == "1"
    if not rank1:
        print(f"--- {fault}", file=sys.stderr, flush=True)
    undo = make_rank_differ(fault, home / fault) if rank1 else (lambda: None)
    callback = EnergyCallback(
        mode="tune",
        backend="simulated",
        output_dir=str(out / fault),
        overrides=[
            "devices.simulated.base_step_time_s=0.01",
            f"devices.simulated.state_dir={home / fault / 'simulated'}",
            "power_limit.wait_steps=1",
            "power_limit.warmup_steps=1",
            "power_limit.profile_steps=2",
            "power_limit.step_w=100",
            "monitor.sync_cuda=false",
        ],
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=16,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[callback, *([Preempted()] if fault == "sigterm-group" else [])],
    )
    try:
        trainer.fit(EmulatedModule(dataset_size=1024))
    finally:
        undo()
    print(f"{fault} rank {trainer.global_rank} global_step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    home, out, faults = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    use_one_cpu_thread()
    for fault in faults:
        fit(home, out, fault)
    # Tear gloo down before interpreter exit: left to the C++ destructors it can abort the process.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
