"""Fit time with EnergyCallback (measuring only) against without, on the emulated workload.

    python benchmarks/callback_overhead.py [--steps 300] [--step-time 0.05] [--repeats 3]

Both fits train the same tiny model whose steps take `--step-time` seconds on a simulated GPU (a real
GPU step of a mid-size model is 50-500 ms). Runs alternate to spread machine noise; the median of each
is compared. Target: under 1% overhead.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

from _lightning import cpu_trainer

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices import simulated_gpus
from wattwise.tools.workload import use_one_cpu_thread


def one_fit(steps: int, step_time_s: float, with_callback: bool, tmp: str) -> float:
    gpus = simulated_gpus(1, base_step_time_s=step_time_s, persist_dir=f"{tmp}/state")
    callbacks = []
    if with_callback:
        callbacks.append(
            EnergyCallback(devices=list(gpus), output_dir=f"{tmp}/run", overrides=["monitor.sync_cuda=false"])
        )
    trainer = cpu_trainer(steps, callbacks)
    module = EmulatedModule(gpus=list(gpus), dataset_size=32 * steps)
    start = time.perf_counter()
    trainer.fit(module)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    use_one_cpu_thread()
    without, with_cb = [], []
    with tempfile.TemporaryDirectory() as tmp:
        one_fit(20, args.step_time, True, tmp)  # warm-up: imports, first-time allocations
        for _ in range(args.repeats):
            without.append(one_fit(args.steps, args.step_time, False, tmp))
            with_cb.append(one_fit(args.steps, args.step_time, True, tmp))
    base, cb = statistics.median(without), statistics.median(with_cb)
    per_step_us = (cb - base) / args.steps * 1e6
    print(f"steps={args.steps} step_time={args.step_time * 1000:.0f} ms repeats={args.repeats} (simulated GPU)")
    print(f"fit without callback: median {base:.3f} s  {[round(x, 3) for x in without]}")
    print(f"fit with callback:    median {cb:.3f} s  {[round(x, 3) for x in with_cb]}")
    print(f"overhead: {100 * (cb - base) / base:+.2f}% ({per_step_us:+.0f} us per step); target < 1%")


if __name__ == "__main__":
    main()
