"""Combining measurements across processes with `torch.distributed` (energy summed, time maxed).

The hot path combines figures with `combine`: one all-reduce of one small float64 tensor however many
windows it carries, on the device the process group's backend needs (CUDA for NCCL, CPU for gloo). The
object collectives (`all_gather`, `broadcast`) are for rare, structured exchanges: a run's start and end,
checkpoints, decisions. Without an initialised process group everything is local.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Collective:
    """The collectives the energy session needs. This base class is the single-process case."""

    rank: int = 0
    world_size: int = 1

    def all_gather(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        """(time_s, energy_j) of each window of this process -> (time maxed, energy summed) over processes."""
        return [(float(t), float(e)) for t, e in windows]


class TorchCollective(Collective):
    """Collectives over the default `torch.distributed` process group."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=src)
        return box[0]

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        """One all-reduce (sum) of a tensor holding each process's times in its own slots and the energies:
        the sum gives every process's time (maxed here) and the total energy of each window."""
        import torch

        n, size, rank = len(windows), self.world_size, self.rank
        if n == 0:
            return []
        values = torch.zeros(n * (size + 1), dtype=torch.float64)
        for i, (time_s, energy_j) in enumerate(windows):
            values[i * (size + 1) + rank] = float(time_s)
            values[i * (size + 1) + size] = float(energy_j)
        if self._device is not None:
            values = values.to(self._device)
        self._dist.all_reduce(values)
        out = values.cpu().view(n, size + 1)
        return [(float(row[:size].max()), float(row[size])) for row in out]

    @property
    def _device(self) -> Any:
        """Where the tensor of `combine` must live: the current CUDA device for NCCL, else the CPU."""
        if self._dist.get_backend() != "nccl":
            return None
        import torch

        return torch.device("cuda", torch.cuda.current_device())


def default_collective() -> Collective:
    """`TorchCollective` when a process group is initialised with more than one process, else local."""
    try:
        import torch.distributed as dist
    except ImportError:
        return Collective()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchCollective()
    return Collective()
