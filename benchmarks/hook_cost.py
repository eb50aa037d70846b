"""CPU time EnergyCallback spends in its per-step hooks, measured around the hooks themselves.

    python benchmarks/hook_cost.py [--steps 2000] [--repeats 3] [--step-time 0.002]

A one-process Lightning fit on the simulated GPU (mode "measure", the default logging cadence of 50 steps)
with the callback's `on_train_batch_start` and `on_train_batch_end` and its `state_key` (which Lightning
reads on every hook call) wrapped in `time.perf_counter`. Per repeat: the median microseconds per step of
a step that does not log (start + end hooks), and the mean over all steps (logging steps included).
Unlike an end-to-end comparison of step times, whose run-to-run spread on a shared machine is a few
percent (benchmarks/hot_path.py), this resolves a cost of microseconds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from typing import Any

from _lightning import cpu_trainer

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices import simulated_gpus
from wattwise.monitor import EnergyMonitor

#: Counter reads of every EnergyMonitor in this process (`TimedCallback` counts them).
READS = [0]
_read_energy = EnergyMonitor._read_energy


def _counted_read(self: EnergyMonitor) -> dict[str, float]:
    READS[0] += 1
    return _read_energy(self)


def _timed_once(name: str) -> Any:
    """EnergyCallback's hook `name`, its time added to `once_s` (a hook Lightning calls once per fit or epoch)."""

    def hook(self: TimedCallback, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return getattr(EnergyCallback, name)(self, *args, **kwargs)
        finally:
            self.once_s += time.perf_counter() - began

    hook.__name__ = name
    return hook


class TimedCallback(EnergyCallback):
    """EnergyCallback whose per-step hooks and state_key add their own time to `spent_s`.

    Beside them, `once_s` is the time of what it does once per fit or epoch (built, set up, the fit's and
    the epochs' starts and ends, the summary written), and `reads` the energy counter reads of its fit.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        EnergyMonitor._read_energy = _counted_read  # type: ignore[method-assign]
        began = time.perf_counter()
        super().__init__(*args, **kwargs)
        self.once_s = time.perf_counter() - began
        self._reads_before = READS[0]
        self.spent_s = 0.0
        self.per_step_s: list[float] = []
        self._start_s = 0.0

    @property
    def reads(self) -> int:
        """Energy counter reads since this callback was built."""
        return READS[0] - self._reads_before

    setup = _timed_once("setup")
    on_fit_start = _timed_once("on_fit_start")
    on_train_start = _timed_once("on_train_start")
    on_train_epoch_start = _timed_once("on_train_epoch_start")
    on_train_epoch_end = _timed_once("on_train_epoch_end")
    on_train_end = _timed_once("on_train_end")
    on_fit_end = _timed_once("on_fit_end")
    teardown = _timed_once("teardown")

    def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        super().on_train_batch_start(*args, **kwargs)
        self._start_s = time.perf_counter() - began
        self.spent_s += self._start_s

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        super().on_train_batch_end(*args, **kwargs)
        took = time.perf_counter() - began
        self.spent_s += took
        self.per_step_s.append(self._start_s + took)

    @property
    def state_key(self) -> str:
        began = time.perf_counter()
        key = super().state_key
        self.spent_s += time.perf_counter() - began
        return key


def one_fit(steps: int, step_time_s: float) -> tuple[float, float]:
    """(median us per step of the two hooks, mean us per step of everything timed)."""
    tmp = tempfile.mkdtemp(prefix="wattwise-hook-cost-")
    gpus = simulated_gpus(1, base_step_time_s=step_time_s, persist_dir=f"{tmp}/state")
    callback = TimedCallback(devices=list(gpus), output_dir=f"{tmp}/run", overrides=["monitor.sync_cuda=false"])
    trainer = cpu_trainer(steps, [callback])
    callback.spent_s = 0.0  # the Trainer read state_key while it was built
    trainer.fit(EmulatedModule(gpus=list(gpus), dataset_size=32 * steps))
    return statistics.median(callback.per_step_s) * 1e6, callback.spent_s / len(callback.per_step_s) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-time", type=float, default=0.002, help="emulated step time, s (default 0.002)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    for repeat in range(args.repeats):
        median_us, mean_us = one_fit(args.steps, args.step_time)
        print(
            f"repeat {repeat + 1}: {median_us:.1f} us per step that does not log (median), "
            f"{mean_us:.1f} us per step on average over {args.steps} steps, logging steps included"
        )


if __name__ == "__main__":
    main()
