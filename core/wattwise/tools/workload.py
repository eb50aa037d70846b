"""The emulated workload: a tiny model really trained on the CPU, timed like a GPU job.

Each step runs a real forward, backward and optimizer step of a small regression model on the CPU, then
sleeps for the difference to the step time the simulated GPU's power model gives for its current power
limit and clock, while the simulated GPU is marked busy. The wall time and the simulated energy of a
step therefore follow the GPU's settings, which is what power-limit tuning needs to be exercised without
a GPU. On real GPUs nothing is emulated: the work just runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from wattwise.devices.base import Device
from wattwise.devices.simulated import SimulatedGPU


def use_one_cpu_thread() -> None:
    """Run the tiny model on one CPU thread.

    Its tensors are far too small to gain from intra-op threads, and on a busy machine their spin-waits
    make a 1 ms step take 30 ms, longer than the modelled GPU step it should fit inside. Called by the
    demo and benchmark runners, which own their process; never on import.
    """
    torch.set_num_threads(1)


def tiny_model(in_features: int = 16, hidden: int = 32) -> nn.Module:
    """The small regression model the emulated workload trains (two linear layers), real work for the CPU."""
    return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))


def tiny_dataset(n: int = 512, in_features: int = 16, seed: int = 0) -> torch.utils.data.TensorDataset:
    """A fixed linear-regression problem with a little noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_features, generator=gen)
    w = torch.randn(in_features, 1, generator=gen)
    y = x @ w + 0.01 * torch.randn(n, 1, generator=gen)
    return torch.utils.data.TensorDataset(x, y)


def emulate_step(gpus: Sequence[Device], work: Callable[[], Any], base_time_s: float | None = None) -> Any:
    """Run `work` as one step on `gpus`: simulated GPUs are busy for the modelled step time.

    With several simulated GPUs (data parallel in one process) the step lasts as long as the slowest.
    `base_time_s` overrides the GPUs' own step time at full power. A simulated GPU changed through the node
    agent is driven through its local view, which shares the agent's settings.
    """
    sims = [s for s in (g.simulation for g in gpus) if s is not None]
    if not sims:
        return work()
    target_s = max(g.step_time_s(base_time_s) for g in sims)
    clock, sleep = sims[0].clock, sims[0].sleep
    with contextlib.ExitStack() as stack:
        for g in sims:
            stack.enter_context(g.busy())
        start = clock()
        result = work()
        remaining = target_s - (clock() - start)
        if remaining > 0:
            sleep(remaining)
    return result


def emulate_stage(stage: Any, gpu: SimulatedGPU, *, forward_s: float, backward_s: float) -> None:
    """Make a `torch.distributed.pipelining` stage's instructions take the simulated GPU's modelled time.

    Each forward (backward) runs with the GPU busy for `forward_s` (`backward_s`) scaled by the power
    model at the GPU's current settings, so a clock locked before the instruction changes its time and
    energy. Attach this first and the `FrequencyController` after, so the clock is set before the time
    is modelled.
    """
    for name, base_s in (("forward_one_chunk", forward_s), ("backward_one_chunk", backward_s)):
        original = getattr(stage, name)

        def wrapped(*args: Any, _original: Any = original, _base_s: float = base_s, **kwargs: Any) -> Any:
            return emulate_step([gpu], lambda: _original(*args, **kwargs), base_time_s=_base_s)

        setattr(stage, name, wrapped)
