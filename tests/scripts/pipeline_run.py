"""A 2-stage 1F1B pipeline (torch.distributed.pipelining) over two CPU processes (gloo), each stage on a
simulated GPU whose clock a FrequencyController sets from a plan.

    python pipeline_run.py PLAN.json [PLAN.json ...]      (PLAN.json: {"plan": [[[instr, mb, mhz], ...], ...]})

The plans are followed one after the other by the same two processes, each on fresh simulated GPUs and a
fresh pipeline stage. For each plan, each rank writes rank<r>.json beside PLAN.json with the applied
sequence, the plan it followed, the clock changes and the energy and time of the iterations.
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.frequency.controller import FrequencyController, stage_plan
from wattwise.monitor import EnergyMonitor
from wattwise.settings.guard import SettingsGuard
from wattwise.tools.workload import emulate_stage

MICROBATCHES, ITERATIONS = 4, 3


def run(rank: int, world: int, plan_paths: list[str]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{Path(plan_paths[0]).parent}/pg", rank=rank, world_size=world)
    for plan_path in plan_paths:
        follow(rank, world, Path(plan_path).parent, plan_path)
    dist.destroy_process_group()


def follow(rank: int, world: int, out: Path, plan_path: str) -> None:
    """Run the iterations under one plan on a fresh simulated GPU; write out/rank<r>.json."""
    gpu = SimulatedGPU(rank, PowerModel.default(), state_file=out / f"gpu{rank}.json")
    torch.manual_seed(0)
    stage = PipelineStage(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), rank, world, torch.device("cpu"))
    emulate_stage(stage, gpu, forward_s=0.03, backward_s=0.06)
    plan = stage_plan(json.loads(Path(plan_path).read_text())["plan"][rank])
    with SettingsGuard() as guard:
        controller = FrequencyController(plan, gpu, guard)
        controller.attach(stage)
        schedule = Schedule1F1B(stage, n_microbatches=MICROBATCHES, loss_fn=nn.functional.mse_loss)
        x, y = torch.randn(16, 8), torch.randn(16, 8)
        monitor = EnergyMonitor([gpu])
        monitor.begin_window("iterations")
        for _ in range(ITERATIONS):
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y)
            dist.barrier()
        m = monitor.end_window("iterations")
        locked_during = gpu.locked_sm_clocks_mhz()
    result = {
        "applied": controller.applied,
        "plan": [[p.instruction, p.microbatch, p.frequency_mhz] for p in plan],
        "clock_changes": controller.clock_changes,
        "energy_j": m.total_energy_j,
        "time_s": m.time_s,
        "locked_during": locked_during,
        "locked_after": gpu.locked_sm_clocks_mhz(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    mp.spawn(run, args=(2, sys.argv[1:]), nprocs=2, join=True)
