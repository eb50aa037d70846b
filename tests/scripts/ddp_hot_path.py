"""A two-process DDP fit of `BoringModel` on the CPU (gloo) that counts the collectives wattwise makes.

`python ddp_hot_path.py OUTPUT_DIR STEPS LOG_EVERY_N_STEPS`: Lightning's DDP launcher starts the second
process by running this script again, unless LOCAL_RANK is set
(tests/integration/lightning_energy/test_lightning_hot_path.py starts both at once, with LOCAL_RANK,
MASTER_ADDR and MASTER_PORT, as torchrun would). Each rank writes
`OUTPUT_DIR/collectives-rank{R}.json`: {"steps": ..., "wattwise": {collective: calls}, "syncs": ...},
counting only the calls made from wattwise's own modules (Lightning's are not counted).
"""

import functools
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch.distributed
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader

import wattwise.measurement
from lightning_energy import EnergyCallback
from wattwise.workload import use_one_cpu_thread

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "barrier",
               "reduce", "gather_object", "scatter_object_list")
counts: Counter[str] = Counter()
syncs = 0


def counting(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__", "").startswith("wattwise"):
            counts[name] += 1
        return original(*args, **kwargs)

    return wrapper


def count_sync() -> None:
    global syncs
    syncs += 1


class LongerBoringModel(BoringModel):
    """One epoch holds every step: the counts are those of the steps, not of epoch ends."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 1024))


if __name__ == "__main__":
    out, steps, every = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    use_one_cpu_thread()
    for name in COLLECTIVES:
        setattr(torch.distributed, name, counting(name, getattr(torch.distributed, name)))
    wattwise.measurement.cuda_sync = count_sync  # type: ignore[assignment]
    callback = EnergyCallback(backend="simulated", output_dir=str(out),
                              overrides=["monitor.sync_cuda=true", "monitor.sample_power=false"])
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=steps, max_epochs=-1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         limit_val_batches=0, log_every_n_steps=every, callbacks=[callback])
    trainer.fit(LongerBoringModel())
    rank = trainer.global_rank
    (out / f"collectives-rank{rank}.json").write_text(json.dumps(
        {"steps": trainer.global_step, "wattwise": dict(counts), "syncs": syncs}))
    # Tear gloo down before interpreter exit: left to the C++ destructors it can abort the process.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
