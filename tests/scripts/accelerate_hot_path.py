"""Two processes (gloo) training Accelerate's regression model with wattwise on: counts the collectives.

Started as a launcher starts it (`accelerate launch --multi_gpu --num_processes 2`, or RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set by hand) with `ACCELERATE_ENERGY=1`. Each process prints
`COLLECTIVES {"training": {...}, "end": {...}}`: the `torch.distributed` object and tensor collectives
called from Python while training and at `end_training`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.test_utils.training import RegressionModel

import accelerate_energy

COUNTED = ("all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "barrier")
calls: Counter[str] = Counter()


def counting(name: str) -> Any:
    original = getattr(dist, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return original(*args, **kwargs)

    return wrapper


def main(steps: int) -> None:
    torch.set_num_threads(1)
    for name in COUNTED:
        setattr(dist, name, counting(name))
    accelerator = accelerate_energy.attach(Accelerator(cpu=True))
    torch.manual_seed(0)
    model = RegressionModel(a=1, b=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(4) + accelerator.process_index
    y = 2 * x + 3
    calls.clear()
    for _ in range(steps):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    training = dict(calls)
    calls.clear()
    accelerator.end_training()
    print("COLLECTIVES " + json.dumps({"training": training, "end": dict(calls)}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
