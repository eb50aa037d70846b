"""The run's hot path over real processes: the one-tensor combine. (The rest of the hot path, in one process:
tests/unit/run/test_hot_path.py.)"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

from tests.support.network import free_port
from wattwise.distributed import TorchCollective


def _combine_worker(rank: int, world: int, port: int, out: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        coll = TorchCollective()
        calls = []
        real = dist.all_reduce

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return real(*args, **kwargs)

        dist.all_reduce = counted
        try:
            result = coll.combine([(1.0 + rank, 10.0 * (rank + 1)), (0.5 * rank, 1.0)])
        finally:
            dist.all_reduce = real
        out.put((rank, result, len(calls)))
    finally:
        dist.destroy_process_group()


def test_combine_is_one_all_reduce_that_maxes_time_and_sums_energy_over_processes():
    port = free_port()
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_combine_worker, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for _, result, calls in results:
        assert calls == 1
        assert result == [(2.0, 30.0), (0.5, 2.0)]
