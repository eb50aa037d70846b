"""Overhead of one measurement window: a `begin_window` + `end_window` pair on simulated GPUs.

A training loop opens and closes a window every step, so this pair must stay cheap next to a step
(milliseconds at least). Target: under 50 microseconds per pair. Timed timeit-style (garbage collection
off, many pairs per run, several runs); prints the median, mean and best per-pair time in microseconds
for 1 and 4 devices, in wall time and in this process's CPU time. The target is judged on the median CPU
time, which other jobs on a busy machine inflate far less than wall time.

    python benchmarks/monitor_overhead.py [--number 10000] [--repeat 7] [--strict]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit
from collections.abc import Sequence
from dataclasses import dataclass

from wattwise.devices.simulated import SimulatedGPU
from wattwise.monitor import EnergyMonitor

TARGET_US = 50.0


@dataclass(frozen=True)
class Result:
    """Per-pair times in microseconds, one per run."""

    devices: int
    wall_us: list[float]
    cpu_us: list[float]


def time_pairs(num_devices: int, number: int, repeat: int) -> Result:
    """Per-pair wall and CPU time (us) of `repeat` runs of `number` begin/end pairs over `num_devices` GPUs."""
    monitor = EnergyMonitor([SimulatedGPU(i) for i in range(num_devices)])

    def pair() -> None:
        monitor.begin_window("step")
        monitor.end_window("step")

    timer = timeit.Timer(pair)
    timer.timeit(number=max(1, number // 10))  # warm up
    wall, cpu = [], []
    for _ in range(repeat):
        cpu_start = time.process_time()
        wall.append(1e6 * timer.timeit(number=number) / number)
        cpu.append(1e6 * (time.process_time() - cpu_start) / number)
    monitor.close()
    return Result(num_devices, wall, cpu)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=10_000, help="pairs per run (default 10000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per device count (default 7)")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 4], help="device counts (default 1 4)")
    parser.add_argument("--target-us", type=float, default=TARGET_US, help="target per pair (default 50)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a median CPU time misses the target")
    args = parser.parse_args(argv)
    if args.number < 1 or args.repeat < 1 or min(args.devices) < 1:
        parser.error("--number, --repeat and --devices must be at least 1")

    print(
        f"EnergyMonitor begin_window + end_window on simulated GPUs "
        f"({args.repeat} runs x {args.number} pairs; microseconds per pair)"
    )
    print(
        f"{'devices':>8} {'clock':>5} {'median':>9} {'mean':>9} {'best':>9}   target {args.target_us:g} us (CPU median)"
    )
    missed = False
    for n in args.devices:
        r = time_pairs(n, args.number, args.repeat)
        ok = statistics.median(r.cpu_us) < args.target_us
        missed |= not ok
        for label, us in (("wall", r.wall_us), ("cpu", r.cpu_us)):
            verdict = ("met" if ok else "MISSED") if label == "cpu" else ""
            print(
                f"{n:>8} {label:>5} {statistics.median(us):>9.2f} {statistics.fmean(us):>9.2f} "
                f"{min(us):>9.2f}   {verdict}"
            )
    return 1 if missed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
