"""A two-process DDP fit on the CPU (gloo) with EnergyCallback tuning simulated GPUs, counting the collectives
and CUDA synchronisations wattwise makes.

Run by tests/integration/lightning_energy/test_lightning_ddp.py: `python ddp_fit.py OUTPUT_DIR STEPS
LOG_EVERY_N_STEPS`. Lightning's DDP launcher starts the second process by running this script again. Each
rank writes `OUTPUT_DIR/collectives-rank{R}.json`: {"steps": ..., "wattwise": {collective: calls},
"syncs": ..., "at_steps": [...], "sync_steps": [...]}, counting only the calls made from wattwise's own modules
(Lightning's are not counted); `at_steps` and `sync_steps` are the trainer's global steps when they were made.
"""

import functools
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch.distributed

import wattwise.run.measurement
from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.tools.workload import use_one_cpu_thread

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "reduce",
    "gather_object",
    "scatter_object_list",
)
counts: Counter[str] = Counter()
syncs = 0
at_steps: set[int] = set()
sync_steps: set[int] = set()
trainer: pl.Trainer | None = None


def global_step() -> int:
    return -1 if trainer is None else trainer.global_step


def counting(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__", "").startswith("wattwise"):
            counts[name] += 1
            at_steps.add(global_step())
        return original(*args, **kwargs)

    return wrapper


def count_sync() -> None:
    global syncs
    syncs += 1
    sync_steps.add(global_step())


if __name__ == "__main__":
    out, steps, every = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    use_one_cpu_thread()
    for name in COLLECTIVES:
        setattr(torch.distributed, name, counting(name, getattr(torch.distributed, name)))
    wattwise.run.measurement.cuda_sync = count_sync  # type: ignore[assignment]
    callback = EnergyCallback(
        mode="tune",
        backend="simulated",
        output_dir=str(out),
        overrides=[
            "devices.simulated.base_step_time_s=0.01",
            "power_limit.wait_steps=1",
            "power_limit.warmup_steps=1",
            "power_limit.profile_steps=2",
            "power_limit.step_w=100",
            "monitor.sync_cuda=true",
        ],
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=steps,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        log_every_n_steps=every,
        callbacks=[callback],
    )
    # One epoch holds every step (32 samples a batch, on each of the two processes): the counts are those of
    # the steps, not of epoch ends.
    trainer.fit(EmulatedModule(dataset_size=2 * 32 * steps))
    (out / f"collectives-rank{trainer.global_rank}.json").write_text(
        json.dumps(
            {
                "steps": trainer.global_step,
                "wattwise": dict(counts),
                "syncs": syncs,
                "at_steps": sorted(at_steps),
                "sync_steps": sorted(sync_steps),
            }
        )
    )
    # Tear gloo down before interpreter exit: left to the C++ destructors it can abort the process.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
