"""Cost of the NVML reads wattwise makes, on a real NVIDIA GPU: per call and per measurement window.

    python benchmarks/nvml_calls.py [--gpu 0] [--calls 500] [--json PATH]

Times, on an idle GPU, each read that measurement and tuning issue (the energy counter, the power
reading, the current power limit) with `time.perf_counter` around the binding's call, `--calls` times
each, and prints the median, 90th percentile and best in milliseconds; then a `begin_window` +
`end_window` pair of `EnergyMonitor` on that one GPU (two energy-counter reads), and how often the
energy counter's value changes (distinct values per second over 3 s of reads), which bounds the shortest
window the counter can measure. Needs nvidia-ml-py and a GPU; exits 2 with one line otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable


def time_calls(fn: Callable[[], object], calls: int) -> dict[str, float]:
    """Median, 90th percentile and best of `calls` timed calls of `fn`, in milliseconds."""
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p90_ms": times[int(0.9 * (len(times) - 1))],
        "best_ms": times[0],
        "calls": calls,
    }


def counter_updates_per_s(read: Callable[[], float], seconds: float = 3.0) -> float:
    """Distinct energy-counter values seen per second while reading it as fast as possible."""
    seen, end = set(), time.perf_counter() + seconds
    while time.perf_counter() < end:
        seen.add(read())
    return (len(seen) - 1) / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU (default 0)")
    parser.add_argument("--calls", type=int, default=500, help="timed calls per read (default 500)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(args.gpu)
    except Exception as exc:  # no binding, no driver, no GPU: one line, no traceback
        print(f"nvml_calls: no NVIDIA GPU to time ({exc})", file=sys.stderr)
        return 2

    from wattwise.devices import discover
    from wattwise.monitor import EnergyMonitor

    reads = {
        "nvmlDeviceGetTotalEnergyConsumption": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        "nvmlDeviceGetPowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
        "nvmlDeviceGetPowerManagementLimit": lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle),
    }
    figures: dict[str, object] = {
        "gpu": pynvml.nvmlDeviceGetName(handle),
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "reads": {name: time_calls(fn, args.calls) for name, fn in reads.items()},
        "energy_counter_updates_per_s": counter_updates_per_s(
            lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        ),
    }
    gpu = next(d for d in discover("nvml").gpus if d.index == args.gpu)
    monitor = EnergyMonitor([gpu])

    def window() -> None:
        monitor.begin_window("w")
        monitor.end_window("w")

    try:
        figures["window_pair"] = time_calls(window, max(50, args.calls // 5))
    finally:
        monitor.close()
    for name, row in {**figures["reads"], "EnergyMonitor window pair": figures["window_pair"]}.items():  # type: ignore[dict-item]
        print(
            f"{name:40s} median {row['median_ms']:8.3f} ms  p90 {row['p90_ms']:8.3f} ms  "
            f"best {row['best_ms']:8.3f} ms  ({row['calls']} calls)"
        )
    print(f"energy counter: {figures['energy_counter_updates_per_s']:.1f} distinct values per second")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(figures, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
