"""Combining measurements across processes with `torch.distributed` (energy summed, time maxed).

Only object collectives are used, so the same code works on gloo (CPU) and NCCL. Without an initialised
process group everything is local.
"""

from __future__ import annotations

from typing import Any


class Collective:
    """The collectives the energy session needs. This base class is the single-process case."""

    rank: int = 0
    world_size: int = 1

    def all_gather(self, obj: Any) -> list[Any]:
        return [obj]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def sum(self, value: float) -> float:
        return float(sum(self.all_gather(value)))

    def max(self, value: float) -> float:
        return float(max(self.all_gather(value)))


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


def default_collective() -> Collective:
    """`TorchCollective` when a process group is initialised with more than one process, else local."""
    try:
        import torch.distributed as dist
    except ImportError:
        return Collective()
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return TorchCollective()
    return Collective()
