"""Combining measurements across processes with `torch.distributed` (energy summed, time maxed).

The hot path combines figures with `combine`: one all-reduce of one small float64 tensor however many
windows it carries, on the device the process group's backend needs (CUDA for NCCL, CPU for gloo). The
object collectives (`all_gather`, `broadcast`) are for rare, structured exchanges: a run's start and end,
checkpoints, decisions. Without an initialised process group everything is local.

The backend's worker thread (gloo's; NCCL's watchdog) drops its reference to a collective's work some time
after the call returned. If that reference is the last one, the work's tensors are freed in that thread,
which then needs the GIL; a process at exit (where the summary is gathered) no longer grants it, and the
thread is torn down inside a C++ destructor: the process aborts ("terminate called without an active
exception", SIGABRT) after the run finished. torch's own object collectives drop their work on return, so
the exchanges here run `async_op=True`, wait, and keep the works and their tensors referenced from Python
(`_hold`, the last few exchanges', not only the last one's: an exchange right after another must not let go
of a work the worker still holds). At exit they are let go of only once the worker had time to drop its
references while the GIL could be had (`_let_go`): the Python side is then the last to hold them.
"""

from __future__ import annotations

import atexit
import pickle
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

#: The works and tensors of this process's last few exchanges, one tuple each (see the module docstring).
_HELD: deque[tuple[Any, ...]] = deque(maxlen=4)
#: How long after an exchange returned the backend's worker may still hold its work, at the most.
WORKER_GRACE_S = 0.25
#: When this process's last exchange returned (`time.monotonic()`), None before the first.
_last_exchange_s: float | None = None


def _hold(*objects: Any) -> None:
    """Keep `objects` (the works and tensors of the exchange just done) referenced for the next few exchanges."""
    global _last_exchange_s
    if _last_exchange_s is None:
        atexit.register(_let_go)
    _HELD.append(objects)
    _last_exchange_s = time.monotonic()


def _let_go() -> None:
    """At exit: wait out the worker's grace after the last exchange (the GIL free meanwhile), then let go."""
    if _last_exchange_s is not None:
        left_s = _last_exchange_s + WORKER_GRACE_S - time.monotonic()
        if left_s > 0:
            time.sleep(left_s)
    _HELD.clear()


def _done(work: Any) -> Any:
    """Wait for an `async_op=True` collective; its work, to hold."""
    work.wait()
    return work


class Collective:
    """The collectives the energy session needs. This base class is the single-process case."""

    rank: int = 0
    world_size: int = 1

    def all_gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order (here, one process: `[obj]`)."""
        return [obj]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """`obj` as the process `src` has it (here, one process: `obj`)."""
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
        """Every process's `obj` (picklable), in rank order: its size, then the padded bytes, gathered."""
        import torch

        data = pickle.dumps(obj)
        device = self._device
        size = torch.tensor([len(data)], dtype=torch.int64, device=device)
        sizes = [torch.zeros_like(size) for _ in range(self.world_size)]
        first = _done(self._dist.all_gather(sizes, size, async_op=True))
        lengths = [int(s.item()) for s in sizes]
        mine = torch.zeros(max(lengths), dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        mine = mine.to(device) if device is not None else mine
        gathered = [torch.empty_like(mine) for _ in range(self.world_size)]
        second = _done(self._dist.all_gather(gathered, mine, async_op=True))
        _hold(first, second, size, sizes, mine, gathered)
        return [pickle.loads(t[:n].cpu().numpy().tobytes()) for t, n in zip(gathered, lengths, strict=True)]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """`obj` of process `src` (picklable) on every process: its size, then its bytes, broadcast."""
        import torch

        device, sending = self._device, self.rank == src
        data = pickle.dumps(obj) if sending else b""
        size = torch.tensor([len(data)], dtype=torch.int64, device=device)
        first = _done(self._dist.broadcast(size, src=src, async_op=True))
        if sending:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            payload = payload.to(device) if device is not None else payload
        else:
            payload = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
        second = _done(self._dist.broadcast(payload, src=src, async_op=True))
        _hold(first, second, size, payload)
        return obj if sending else pickle.loads(payload.cpu().numpy().tobytes())

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        """One all-reduce (sum) of a tensor holding each process's times in its own slots and the energies.

        The sum gives every process's time (maxed here) and the total energy of each window.
        """
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
        _hold(_done(self._dist.all_reduce(values, async_op=True)), values)
        out = values.cpu().view(n, size + 1)
        return [(float(row[:size].max()), float(row[size])) for row in out]

    @property
    def _device(self) -> Any:
        """Where the tensors of a collective must live: the current CUDA device for NCCL, else the CPU (None)."""
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
