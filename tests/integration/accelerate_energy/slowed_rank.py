"""A two-process Accelerate script whose rank 1 is slower: each step sleeps its own work, rank 1's longer.

Its own steps drive the simulated GPUs (`devices.simulated_drive=steps`, set by the test): rank 0 then
waits in the gradient all-reduce for rank 1 every step. Each process prints one line, `walls <rank>`
and its steps' wall times in seconds.
"""

from __future__ import annotations

import sys
import time

import torch
from accelerate import Accelerator
from torch import nn

import accelerate_energy

#: Each process's own work per step (s): rank 1 is the slowed one.
WORK_S = {0: 0.01, 1: 0.03}


def main(steps: int) -> None:
    accelerator = accelerate_energy.attach(Accelerator(cpu=True))
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank = accelerator.process_index
    walls = []
    for _ in range(steps):
        started = time.perf_counter()
        time.sleep(WORK_S[rank])
        accelerator.backward(model(torch.ones(8, 4)).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        walls.append(time.perf_counter() - started)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    print(f"walls {rank}", *(f"{w:.4f}" for w in walls), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
