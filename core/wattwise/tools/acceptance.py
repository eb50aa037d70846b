"""Real-GPU acceptance: check the NVML path on a real NVIDIA GPU, else amdsmi's on an AMD GPU; record what it saw.

    python -m wattwise.acceptance [--out DIR] [--quick] [--gpu INDEX]     (also: wattwise acceptance)
    python -m wattwise.acceptance --levers [--simulated] [--quick]         (the three levers, `tools.levers`)

Checks, each recorded as passed / failed / skipped with its reason, in `DIR/acceptance.json` and
`DIR/acceptance.md` with the GPU's name, the driver and NVML versions and the time:

1. `discovery`: every GPU, its power-limit range, supported SM clocks, energy-counter support.
2. `energy_counter`: a matrix-multiply load; energy from the counter against the integral of 10 ms power
   samples (agreement in %), the counter's update rate (changes of its value per second, and the mean
   period between changes), and the cost of a measurement window with and without CUDA synchronize.
3. `power_limit`: set the minimum, read it back, run the load (power must stay under the limit + 5%, the
   step time must rise; how long the new limit takes to hold, between changes of the counter), restore;
   then a child process that set a limit is SIGKILLed and the recovery path must restore it
   (`kill_recovery`). Where the driver refuses (a container without CAP_SYS_ADMIN), NVML's own words.
4. `clocks`: lock the SM clock to six supported frequencies, time and energy of the load at each,
   reset (the clock curve's shape); written as `DIR/clock_profile.csv` (`frequency,time,energy`) and,
   with check 3, `DIR/power_limit_profile.csv` (`power_limit,time,power`, the simulated GPU's power-model
   format). `clock_switch`: how long a locked clock takes to act (three changes down and three up, the
   median).
5. `training`: a small transformer (synthetic tokens, CUDA, bf16) under Lightning with `EnergyCallback`
   in tune mode: chosen limit, profile, saving against the maximum limit measured in the same run, and
   the hot-path overhead of measure mode against no callback.
6. `pipeline`: two halves of a small GPT as two stages on one GPU, `PipelineProfiler` over three
   supported clocks, then `wattwise frontier` and `wattwise plan` on the measured profile.

The report sets the counter's period, the clock-switch latency, the power limit's settling and the
clock curve beside the simulated GPU's preset for that GPU generation (`preset_rows`), so that a run on
hardware settles what the simulated GPU still assumes.

`--levers` runs instead the three lever checks of `wattwise.tools.levers` (`cap_sweep`, `tuning_vs_sweep`,
`pipeline_measured`), each beside the published figure it reproduces.

Without a GPU every check is skipped with its reason and the command exits 0; with a GPU a failed check
exits 1. Nothing here is simulated, except with `--levers --simulated`, which runs the lever checks on the
simulated GPU and labels the report and every figure simulated; otherwise a check that cannot run on real
hardware is skipped, never passed.

A rerun into the same folder keeps the checks that passed there on the same GPU (and length) and runs the
others, so a run that was cut short resumes check by check (`acceptance.json` is written after each check;
`--fresh` runs them all again). `--budget-s S` skips, with its reason, a check that would not finish within
S seconds of the start.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from wattwise.devices import probe_gpus
from wattwise.devices.base import Device, DeviceError, DeviceSpec, NoPermissionError
from wattwise.safe_files import json_text
from wattwise.settings.guard import SignalledError
from wattwise.tools import levers
from wattwise.tools.checks import (
    FAILED,
    NO_GPU,
    PASSED,
    SKIPPED,
    AcceptanceReport,
    Check,
    CheckResult,
    Context,
    Failure,
    GpuInfo,
    MatmulLoad,
    Skip,
    markdown_table,
)

#: Measured power may exceed a power limit by this fraction (the driver's control loop, sampling).
LIMIT_ALLOWANCE = 0.05
SCHEMA = "wattwise.acceptance/1"


def check_discovery(ctx: Context) -> dict[str, Any]:
    """Check 1: each GPU found, its power-limit range, SM clocks (count, highest, lowest) and energy counter.

    Raises:
        Skip: no GPU was found.
    """
    if not ctx.gpus:
        raise Skip(NO_GPU)
    gpus = []
    for gpu in ctx.gpus:
        rng = gpu.power_limit_range()
        clock_note: str | None = None
        try:
            clocks = gpu.supported_sm_clocks_mhz()
        except DeviceError as err:
            clocks, clock_note = [], str(err)
        gpus.append(
            {
                "index": gpu.index,
                "name": gpu.name,
                "power_limit_w": gpu.power_limit_w(),
                "power_limit_min_w": rng.min_w,
                "power_limit_max_w": rng.max_w,
                "sm_clocks_mhz": {
                    "count": len(clocks),
                    "max": max(clocks, default=None),
                    "min": min(clocks, default=None),
                },
                "sm_clocks_note": clock_note,
                "energy_counter": gpu.has_energy_counter(),
            }
        )
    return {"gpus": gpus}


class PowerPoller:
    """Polls one GPU's power every `interval_s` in a thread; the trapezoid integral of the samples."""

    def __init__(self, gpu: Device, interval_s: float = 0.01) -> None:
        self.gpu, self.interval_s = gpu, interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wattwise-acceptance-poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.gpu.power_w()))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PowerPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def energy_j(self) -> float:
        """The energy of the samples so far (J): the trapezoid integral of power over time."""
        s = self.samples
        return sum(0.5 * (w0 + w1) * (t1 - t0) for (t0, w0), (t1, w1) in itertools.pairwise(s))

    def mean_power_w(self) -> float:
        """The mean of the samples so far (W); NaN when there is none."""
        return sum(w for _, w in self.samples) / len(self.samples) if self.samples else math.nan


def check_energy_counter(ctx: Context) -> dict[str, Any]:
    """Check 2: the energy counter under load against 10 ms power polling, its update rate, a window's cost.

    Raises:
        Skip: no load can run, or the GPU has no energy counter.
        Failure: the counter did not advance, or it and the polled integral disagree by more than 10%.
    """
    load = ctx.require_load()
    gpu = ctx.require_gpu()
    if not gpu.has_energy_counter():
        raise Skip(f"{gpu.name} has no energy counter (older than Volta): wattwise integrates power samples")
    load.step()  # warm up (allocation, kernels)
    seconds = ctx.seconds(20.0)
    with PowerPoller(gpu) as poller:
        e0 = gpu.energy_j()
        load.run_for(seconds)
        e1 = gpu.energy_j()
    counter_j, polled_j = e1 - e0, poller.energy_j()
    agreement = abs(counter_j - polled_j) / counter_j * 100 if counter_j > 0 else math.inf
    # Update rate: changes of the counter's value per second while loaded (N values read are N - 1 changes).
    span_s = min(2.0, seconds)
    thread = threading.Thread(target=load.run_for, args=(span_s,), daemon=True)
    thread.start()
    changes = counter_changes(gpu.energy_j, span_s)
    thread.join()
    reads = changes.reads
    updates_per_s = changes.count / span_s
    overhead = _window_overhead_s(gpu, load)
    figures = {
        "load_s": seconds,
        "counter_energy_j": counter_j,
        "polled_energy_j": polled_j,
        "disagreement_pct": agreement,
        "poll_samples": len(poller.samples),
        "mean_power_w": poller.mean_power_w(),
        "counter_updates_per_s": updates_per_s,
        "counter_changes": changes.count,
        "counter_period_s": changes.period_s,
        "counter_reads": reads,
        **overhead,
    }
    if not counter_j > 0:
        raise Failure(f"the energy counter did not advance under load ({counter_j:g} J)")
    if agreement > 10.0:
        raise Failure(
            f"the counter ({counter_j:.1f} J) and 10 ms power polling ({polled_j:.1f} J) disagree by "
            f"{agreement:.1f}% (> 10%)",
            figures,
        )
    return figures


@dataclasses.dataclass(frozen=True)
class CounterChanges:
    """How often a counter's value changed over a span of reads."""

    #: Changes seen: reads whose value differs from the read before (N distinct values in a row: N - 1).
    count: int
    #: Mean time between two changes: from the first change to the last over the changes between (s; NaN
    #: with fewer than two changes).
    period_s: float
    reads: int


def counter_changes(
    read: Callable[[], float],
    span_s: float,
    *,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> CounterChanges:
    """Read `read` every millisecond for `span_s` and count its changes (not its distinct values)."""
    end = clock() + span_s
    last = read()
    reads, count = 1, 0
    first_s = last_s = math.nan
    while clock() < end:
        sleep(0.001)
        value = read()
        reads += 1
        if value != last:
            count += 1
            last_s = clock()
            if count == 1:
                first_s = last_s
            last = value
    period_s = (last_s - first_s) / (count - 1) if count >= 2 else math.nan
    return CounterChanges(count, period_s, reads)


def _window_overhead_s(gpu: Device, load: MatmulLoad, pairs: int = 200) -> dict[str, float]:
    from wattwise.monitor import EnergyMonitor

    out = {}
    for label, sync in (("window_overhead_no_sync_s", None), ("window_overhead_sync_s", load.sync)):
        monitor = EnergyMonitor([gpu], sync=sync)
        try:
            start = time.perf_counter()
            for _ in range(pairs):
                monitor.begin_window("w")
                monitor.end_window("w")
            out[label] = (time.perf_counter() - start) / pairs
        finally:
            monitor.close()
    return out


#: Seconds of load at a new limit before it is measured: the driver's power controller settles meanwhile.
LIMIT_SETTLE_S = 1.0


def _at_counter_edge(gpu: Device, load: MatmulLoad, timeout_s: float = 1.0) -> tuple[float, float]:
    """(energy, time) just after the energy counter changes value, the GPU busy all the while.

    The counter changes only about 10 times a second on an H100: a window that starts and ends on its
    changes measures the energy of exactly that interval, where a window of arbitrary ends would be off by
    up to one update's energy at each end (5% of a 2 s window).
    """
    load.enqueue(64)
    first = gpu.energy_j()
    deadline = time.perf_counter() + timeout_s
    value = first
    while value == first and time.perf_counter() < deadline:
        value = gpu.energy_j()
    now = time.perf_counter()
    load.sync()
    return value, now


def _limit_run(gpu: Device, load: MatmulLoad, seconds: float) -> dict[str, float]:
    """Load at the current limit, once it has settled under load: the median step time and the mean power.

    The power is the energy counter's between two of its changes (`_at_counter_edge`), else polled.
    """
    load.run_for(LIMIT_SETTLE_S)
    counter = gpu.has_energy_counter()
    with PowerPoller(gpu, 0.05) as poller:
        e0, t0 = _at_counter_edge(gpu, load) if counter else (None, time.perf_counter())
        times = load.run_for(seconds)
        e1, t1 = _at_counter_edge(gpu, load) if counter else (None, time.perf_counter())
    elapsed = t1 - t0
    power = (e1 - e0) / elapsed if e0 is not None and e1 is not None else poller.mean_power_w()
    return {"step_time_s": sorted(times)[len(times) // 2], "power_w": power, "steps": len(times)}


def _limit_settling(gpu: Device, guard: Any, load: MatmulLoad, limit_w: float, span_s: float = 3.0) -> dict[str, Any]:
    """How long a new (lower) limit takes to hold under load: the power between changes of the energy counter.

    Loaded at the current limit for a second, the limit is set to `limit_w`; the power over each interval
    between two changes of the counter (about 0.1 s) is read for `span_s`. The settling time is when the
    first interval ends from which on every interval stays within 5% of the limit (to one interval).
    """
    if not gpu.has_energy_counter():
        return {"skipped": "no energy counter"}
    thread = threading.Thread(target=load.run_for, args=(1.0 + span_s,), daemon=True)
    thread.start()
    time.sleep(1.0)
    changed_at = time.perf_counter()
    guard.set_power_limit(gpu, limit_w)
    points = [(changed_at, gpu.energy_j())]
    while time.perf_counter() - changed_at < span_s:
        value = gpu.energy_j()
        if value != points[-1][1]:
            points.append((time.perf_counter(), value))
        time.sleep(0.001)
    thread.join()
    intervals = [
        (t1 - changed_at, (e1 - e0) / (t1 - t0)) for (t0, e0), (t1, e1) in itertools.pairwise(points[1:]) if t1 > t0
    ]
    settle_s = None
    for k, (end_s, _) in enumerate(intervals):
        if all(w <= limit_w * (1 + LIMIT_ALLOWANCE) for _, w in intervals[k + 1 :]) and k + 1 < len(intervals):
            settle_s = end_s
            break
    return {"limit_w": limit_w, "settle_s": settle_s, "interval_powers_w": [round(w, 1) for _, w in intervals]}


def check_clock_switch(ctx: Context) -> dict[str, Any]:
    """How long a locked SM clock takes to act: from the call until short loads run at the new clock's speed.

    One multiply at a time (about 1.6 ms on an H100 at its highest clock) runs at the highest clock, then
    the lowest is locked (`wattwise.frequency.profiler.clock_change_s`), then back; three changes each way,
    the median. The pipeline planner needs this latency: no frequency segment shorter than it.

    Raises:
        Skip: no load, too few known SM clocks, or the driver refused to lock them.
    """
    from wattwise.frequency.profiler import clock_change_s
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import MatmulLoad

    load = ctx.require_load()
    gpu = ctx.require_gpu()
    clocks = _sweep_clocks_mhz(gpu)
    high, low = clocks[0], clocks[-1]
    short = MatmulLoad(load.cuda_index, load.size, per_step=1)
    down, up = [], []
    with SettingsGuard() as guard:
        try:
            for _ in range(3):
                down.append(clock_change_s(gpu, short.step, guard, (high, low), window_s=0.3))
                up.append(clock_change_s(gpu, short.step, guard, (low, high), window_s=0.3))
        except NoPermissionError as err:
            raise Skip(f"locking SM clocks was refused; NVML said: {err}") from None
        guard.reset_sm_clocks(gpu)
    return {
        "high_mhz": high,
        "low_mhz": low,
        "down_s": down,
        "up_s": up,
        "clock_change_s": sorted(down + up)[len(down + up) // 2],
    }


def check_power_limit(ctx: Context) -> dict[str, Any]:
    """Check 3: set the lowest limit through the settings guard, read it back, load at both ends, restore it.

    With a load that can run, the GPU must stay within `LIMIT_ALLOWANCE` of the lowest limit; a step time that did not
    rise there is a note. The two measured points are shared for the clock check's power-limit profile.

    Raises:
        Skip: there is no GPU, or the driver refused the change (its words).
        Failure: a limit read back, a power drawn or the restored limit is not what it should be.
    """
    from wattwise.settings.guard import SettingsGuard

    gpu = ctx.require_gpu()
    rng = gpu.power_limit_range()
    original = gpu.power_limit_w()
    figures: dict[str, Any] = {"original_w": original, "min_w": rng.min_w, "max_w": rng.max_w}
    load_reason = ctx.load.unavailable() if ctx.load is not None else "no load"
    with SettingsGuard() as guard:
        try:
            guard.set_power_limit(gpu, rng.min_w)
        except NoPermissionError as err:
            said = "NVML" if gpu.backend == "nvml" else gpu.backend
            raise Skip(f"setting the power limit was refused; {said} said: {err}") from None
        figures["read_back_w"] = gpu.power_limit_w()
        if abs(figures["read_back_w"] - rng.min_w) > 1.0:
            raise Failure(f"set {rng.min_w:g} W, read back {figures['read_back_w']:g} W", figures)
        if load_reason is None:
            assert ctx.load is not None
            seconds = ctx.seconds(10.0)
            guard.set_power_limit(gpu, rng.max_w)
            figures["settle"] = _limit_settling(gpu, guard, ctx.load, rng.min_w)
            at_min = _limit_run(gpu, ctx.load, seconds)
            guard.set_power_limit(gpu, rng.max_w)
            at_max = _limit_run(gpu, ctx.load, seconds)
            figures.update(at_min=at_min, at_max=at_max)
            ctx.shared["power_limit_profile"] = [
                (rng.max_w, at_max["step_time_s"], at_max["power_w"]),
                (rng.min_w, at_min["step_time_s"], at_min["power_w"]),
            ]
        guard.restore_all()
    figures["restored_w"] = gpu.power_limit_w()
    if abs(figures["restored_w"] - original) > 1.0:
        raise Failure(f"restored to {figures['restored_w']:g} W, not the original {original:g} W", figures)
    if load_reason is None:
        at_min, at_max = figures["at_min"], figures["at_max"]
        if at_min["power_w"] > rng.min_w * (1 + LIMIT_ALLOWANCE):
            raise Failure(
                f"under a {rng.min_w:g} W limit the GPU drew {at_min['power_w']:.1f} W (> {LIMIT_ALLOWANCE:.0%} over)",
                figures,
            )
        if not at_min["step_time_s"] > at_max["step_time_s"]:
            figures["note"] = "the step time did not rise at the minimum limit (a load below the limit?)"
    else:
        figures["load"] = f"skipped: {load_reason}"
    return figures


def check_kill_recovery(ctx: Context) -> dict[str, Any]:
    """A child wattwise process sets a limit and is SIGKILLed: the next process's recovery restores it."""
    from wattwise.settings.recovery import recover_stale_journals

    gpu = ctx.require_gpu()
    rng = gpu.power_limit_range()
    original = gpu.power_limit_w()
    target = rng.min_w if original != rng.min_w else rng.max_w
    figures: dict[str, Any] = {"original_w": original, "child_target_w": target}
    child = ctx.spawn_holder(gpu.spec(), target)
    try:
        line = child.stdout.readline().decode().strip() if child.stdout is not None else ""
        if line != "ready":
            err = child.stderr.read().decode().strip().splitlines() if child.stderr is not None else []
            why = err[-1] if err else (line or "no output")
            if "NoPermission" in why or "permission" in why.lower():
                raise Skip(f"the child could not set the limit; it said: {why}")
            raise Failure(f"the child process that holds a limit did not start ({why})", figures)
        figures["child_set_w"] = gpu.power_limit_w()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    recovered = recover_stale_journals()
    figures["recovered"] = len(recovered) if isinstance(recovered, list | tuple) else str(recovered)
    figures["after_recovery_w"] = gpu.power_limit_w()
    if abs(figures["child_set_w"] - target) > 1.0:
        raise Failure(f"the child set {target:g} W but the GPU read {figures['child_set_w']:g} W", figures)
    if abs(figures["after_recovery_w"] - original) > 1.0:
        raise Failure(
            f"after SIGKILL the limit stayed at {figures['after_recovery_w']:g} W; recovery did not "
            f"restore {original:g} W",
            figures,
        )
    return figures


#: Locked clocks of the clock check: enough points for the curve's shape (its linear and superlinear parts).
SWEEP_CLOCKS = 6


def _sweep_clocks_mhz(gpu: Device, count: int = SWEEP_CLOCKS) -> list[int]:
    """`count` supported SM clocks from the highest to the lowest, evenly spread; a skip when unknown or too few."""
    try:
        supported = sorted(gpu.supported_sm_clocks_mhz(), reverse=True)
    except DeviceError as err:
        raise Skip(f"supported SM clocks unknown; NVML said: {err}") from None
    if len(supported) < 3:
        raise Skip(f"fewer than three supported SM clocks ({supported})")
    if len(supported) <= count:
        return supported
    return sorted({supported[round(i * (len(supported) - 1) / (count - 1))] for i in range(count)}, reverse=True)


def check_clocks(ctx: Context) -> dict[str, Any]:
    """Check 4: the load at six locked SM clocks (highest to lowest), written as `clock_profile.csv`.

    The energy per step at each against the highest's is the clock curve's shape, which the report sets
    beside the simulated GPU's preset for this GPU (`preset_rows`).

    Also writes `power_limit_profile.csv` from check 3's measurements when it ran.

    Raises:
        Skip: no load, fewer than three known SM clocks, or the driver refused to lock them.
        Failure: the load was not slower at the lowest clock than at the highest.
    """
    from wattwise.settings.guard import SettingsGuard

    load = ctx.require_load()
    gpu = ctx.require_gpu()
    chosen = _sweep_clocks_mhz(gpu)
    rows = []
    with SettingsGuard() as guard:
        for mhz in chosen:
            try:
                guard.lock_sm_clocks(gpu, mhz, mhz)
            except NoPermissionError as err:
                raise Skip(f"locking SM clocks was refused; NVML said: {err}") from None
            run = _limit_run(gpu, load, ctx.seconds(2.5))
            rows.append(
                {"frequency_mhz": mhz, "time_s": run["step_time_s"], "energy_j": run["power_w"] * run["step_time_s"]}
            )
        guard.reset_sm_clocks(gpu)
    _write_csv(
        ctx.out / "clock_profile.csv",
        ["frequency", "time", "energy"],
        [(r["frequency_mhz"], r["time_s"], r["energy_j"]) for r in rows],
    )
    profile = ctx.shared.get("power_limit_profile")
    if profile:
        _write_csv(
            ctx.out / "power_limit_profile.csv",
            ["power_limit", "time", "power"],
            [(w, t / profile[0][1], p) for w, t, p in sorted(profile)],
        )
    if not rows[-1]["time_s"] > rows[0]["time_s"]:
        raise Failure(f"the load was not slower at {chosen[-1]} MHz than at {chosen[0]} MHz", {"rows": rows})
    return {"rows": rows}


def check_training(ctx: Context) -> dict[str, Any]:
    """Check 5: training under Lightning with the `EnergyCallback`, run by the adapter's own check.

    The check is the entry point `lightning` of the group `wattwise.acceptance`: wattwise never imports a
    framework.

    Raises:
        Skip: no load can run, or lightning_energy is not installed.
    """
    ctx.require_load()
    gpu = ctx.require_gpu()
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group="wattwise.acceptance")}
    if "lightning" not in found:
        raise Skip("lightning_energy is not installed (its training check is an entry point)")
    result: dict[str, Any] = found["lightning"].load()(gpu, ctx.out, quick=ctx.quick)
    return result


def check_pipeline(ctx: Context) -> dict[str, Any]:
    """Check 6: profile two halves of a small GPT at three SM clocks, then `wattwise frontier` and `plan`.

    The first half of the lever check `pipeline_measured` (`levers_pipeline.profile_and_plan`), on a model of its own
    (`levers_rig.PIPELINE_CHECK_MODEL`), without following the plan.

    Raises:
        Skip: no load, or the driver refused to lock the SM clocks.
        Failure: `wattwise frontier` or `wattwise plan` failed on the measured profile.
    """
    ctx.require_load()
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.levers_pipeline import PipelineFiles, profile_and_plan, stages_of
    from wattwise.tools.levers_rig import PIPELINE_CHECK_MODEL

    rig = dataclasses.replace(levers.Rig.of(ctx, trainer=False), model=PIPELINE_CHECK_MODEL)
    gpu = rig.gpu
    freqs = _sweep_clocks_mhz(gpu, 3)
    files = PipelineFiles.in_folder(ctx.out, "pipeline_profile.csv")
    with SettingsGuard() as guard:
        profile_and_plan(
            rig,
            stages_of(rig),
            guard,
            files,
            clocks_mhz=freqs,
            iterations=3 if ctx.quick else 10,
            warmup=2,
            unit_time_s=0.001,
            p_blocking_w=lambda: round(gpu.power_w(), 1),
        )
    points = json.loads(files.frontier.read_text())
    return {
        "frequencies_mhz": freqs,
        "profile_csv": str(files.profile_csv),
        "frontier": str(files.frontier),
        "plan": str(files.plan),
        "frontier_points": len(points.get("points", [])) if isinstance(points, dict) else None,
    }


CHECKS: list[tuple[str, Check]] = [
    ("discovery", check_discovery),
    ("energy_counter", check_energy_counter),
    ("power_limit", check_power_limit),
    ("kill_recovery", check_kill_recovery),
    ("clocks", check_clocks),
    ("clock_switch", check_clock_switch),
    ("training", check_training),
    ("pipeline", check_pipeline),
]
#: About how long each of CHECKS takes on a GPU at default length, and with --quick (s), for --budget-s.
CHECK_ESTIMATE_S: dict[str, tuple[float, float]] = {
    "discovery": (1.0, 1.0),
    "energy_counter": (30.0, 10.0),
    "power_limit": (30.0, 10.0),
    "kill_recovery": (10.0, 10.0),
    "clocks": (25.0, 10.0),
    "clock_switch": (10.0, 10.0),
    "training": (180.0, 90.0),
    "pipeline": (90.0, 40.0),
}


def all_checks() -> list[tuple[str, Check]]:
    """Every check, in the order they run and the report lists them: CHECKS, then the lever checks."""
    return [*CHECKS, *levers.LEVER_CHECKS]


def estimate_s(name: str, gpu: Device | None, quick: bool) -> float:
    """About how long check `name` takes on `gpu` (0 without a GPU: it skips at once)."""
    if gpu is None:
        return 0.0
    if name in CHECK_ESTIMATE_S:
        return CHECK_ESTIMATE_S[name][1 if quick else 0]
    return levers.estimate_s(name, gpu, quick)


def _write_text(path: Path, text: str) -> None:
    from wattwise.safe_files import replace_file

    replace_file(path, lambda fh: fh.write(text))


def _write_csv(path: Path, header: list[str], rows: list[tuple[Any, ...]]) -> None:
    cells = (",".join(repr(float(v)) if isinstance(v, float) else str(v) for v in row) for row in rows)
    _write_text(path, ",".join(header) + "\n" + "".join(line + "\n" for line in cells))


# -- running and reporting -----------------------------------------------------------------------------
def versions() -> dict[str, str | None]:
    """Driver and NVML versions, when NVML answers (None for each it does not give)."""
    out: dict[str, str | None] = dict.fromkeys(("driver", "nvml", "cuda_driver"))
    with contextlib.suppress(ImportError):  # no NVML binding installed
        from wattwise.devices.nvml import driver_versions

        out.update(driver_versions())
    return out


def run_checks(
    out: Path,
    *,
    quick: bool = False,
    gpu_index: int = 0,
    gpus: list[Device] | None = None,
    load: MatmulLoad | None = None,
    spawn_holder: Callable[[DeviceSpec, float], subprocess.Popen[bytes]] | None = None,
    only: list[str] | None = None,
    levers_only: bool = False,
    budget_s: float | None = None,
    fresh: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> AcceptanceReport:
    """Run the checks (CHECKS, the lever checks with `levers_only`, or `only` those); write acceptance.json and .md.

    A check that passed in `out` before, on the same GPU and at the same length, is kept unless `fresh`;
    checks of an earlier run not run now stay in the report. Both files are written after each check.
    With `budget_s`, a check that would not end within that many seconds of the start is skipped.
    """
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if gpus is None:
        gpus = probe_gpus(notes)
    gpu = next((g for g in gpus if g.index == gpu_index), None)
    if gpu is None and gpus:
        from wattwise.errors import UsageError

        raise UsageError(
            f"--gpu {gpu_index}: no such GPU on this machine; give one of {', '.join(str(g.index) for g in gpus)}"
        )
    if load is None and gpu is not None and gpu.simulation is None:
        load = MatmulLoad(_cuda_index(gpu))
    ctx = Context(gpus=gpus, gpu=gpu, load=load, out=out, quick=quick, spawn_holder=spawn_holder or spawn_limit_holder)
    registered = all_checks()
    default = levers.LEVER_CHECKS if levers_only else CHECKS
    wanted = [n for n, _ in registered if n in only] if only is not None else [n for n, _ in default]
    gpu_info: GpuInfo | None = (
        {"index": gpu.index, "name": gpu.name, "describe": gpu.describe()} if gpu is not None else None
    )
    simulated = gpu is not None and gpu.simulated
    earlier = {} if fresh else _earlier_checks(out / "acceptance.json", gpu_info, simulated, quick, notes)
    known = {n for n, _ in registered}
    problem = next((p for c in earlier.values() if (p := check_problem(c, known)) is not None), None)
    if problem is not None:
        from wattwise.safe_files import set_aside_saying

        aside = set_aside_saying(out / "acceptance.json")
        said = f"{out / 'acceptance.json'}: {problem}; it is {aside}, and every check runs again"
        print(f"wattwise acceptance: {said}", file=sys.stderr)
        notes.append(said)
        earlier = {}
    results: dict[str, CheckResult] = {
        name: CheckResult(c["name"], c["status"], c.get("reason"), c.get("figures") or {}, c.get("kept_from"))
        for name, c in earlier.items()
    }

    def write() -> AcceptanceReport:
        listed = [results[n] for n, _ in registered if n in results]
        report: AcceptanceReport = {
            "schema": SCHEMA,
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "host": os.uname().nodename,
            "gpu": gpu_info,
            "simulated": simulated,
            "versions": versions(),
            "quick": quick,
            "notes": notes,
            "checks": [r.to_dict() for r in listed],
            "summary": {s: sum(r.status == s for r in listed) for s in (PASSED, FAILED, SKIPPED)},
        }
        _write_text(out / "acceptance.json", json_text(report) + "\n")
        _write_text(out / "acceptance.md", markdown(report))
        return report

    for name, c in earlier.items():
        if c["status"] == PASSED:
            ctx.shared[name] = c.get("figures") or {}
    start = clock()
    for name, check in registered:
        if name not in wanted:
            continue
        kept = earlier.get(name)
        if kept is not None and kept["status"] == PASSED:
            results[name].kept_from = kept.get("kept_from") or kept.get("time")
            continue
        left_s = None if budget_s is None else budget_s - (clock() - start)
        needs_s = estimate_s(name, gpu, quick)
        if left_s is not None and needs_s > left_s:
            results[name] = CheckResult(
                name,
                SKIPPED,
                f"would not fit in --budget-s {budget_s:g} (needs about {needs_s:.0f} s, "
                f"{max(0.0, left_s):.0f} s left); rerun into the same --out to resume",
            )
        else:
            try:
                results[name] = _run_one(name, check, ctx)
            except (KeyboardInterrupt, SystemExit):  # Ctrl-C or SIGTERM: stop, keeping what finished
                notes.append(
                    f"interrupted during {name}: the GPU settings were restored, the checks that finished are kept; "
                    "rerun into the same --out to resume"
                )
                write()
                raise
            if results[name].status == PASSED:
                ctx.shared[name] = results[name].figures
        write()
    return write()


def _earlier_checks(
    path: Path, gpu_info: GpuInfo | None, simulated: bool, quick: bool, notes: list[str]
) -> dict[str, dict[str, Any]]:
    """The checks of an earlier report at `path` that this run continues, by name (none when it differs).

    Each passed check carries `kept_from`, the time of the run that passed it.
    """
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(earlier, dict) or earlier.get("schema") != SCHEMA or gpu_info is None:
        return {}
    before = earlier.get("gpu") or {}
    if not isinstance(before, dict) or not isinstance(earlier.get("checks") or [], list):
        notes.append(f"{path} is not an acceptance report this wattwise reads (its gpu or checks): replaced")
        return {}
    same = (
        before.get("name") == gpu_info["name"]
        and before.get("index") == gpu_info["index"]
        and bool(earlier.get("simulated")) == simulated
        and bool(earlier.get("quick")) == quick
    )
    if not same:
        notes.append(f"{path} was written by a run on another GPU or at another length: replaced")
        return {}
    out = {}
    for c in earlier.get("checks") or []:
        if isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("status"), str):
            if c["status"] == PASSED and "kept_from" not in c:
                c["kept_from"] = earlier.get("time")
            out[c["name"]] = c
    return out


#: The most GPUs' indices `--gpu` takes (a node's, with room to spare).
MAX_GPU_INDEX = 1023
#: The figures a check's dependents read from it when it is kept (a kept check lacking them is run again).
_NEEDED_FIGURES = {"cap_sweep": ("rows", "default_w")}
#: The bound of a figure by the unit its name ends in.
_FIGURE_UNITS = (("_w", "POWER_W"), ("_s", "TIME_S"), ("_j", "ENERGY_J"), ("_mhz", "FREQUENCY_MHZ"))


def _figure_problem(value: object, where: str) -> str | None:
    """Why a kept check's figure cannot be one (a number of its unit's bound, text, a list or object of them)."""
    from wattwise import bounds

    if isinstance(value, dict):
        for key, item in value.items():
            problem = _figure_problem(item, f"{where}.{key}")
            if problem is not None:
                return problem
            unit = next((b for suffix, b in _FIGURE_UNITS if str(key).endswith(suffix)), None)
            if unit is not None:
                problem = _unit_problem(item, getattr(bounds, unit), f"{where}.{key}")
                if problem is not None:
                    return problem
        return None
    if isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _figure_problem(item, f"{where}[{i}]"))), None)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where} must be a finite number (got {value!r})"
    if value is None or isinstance(value, str | bool | int | float):
        return None
    return f"{where} is not a figure (got {type(value).__name__})"


def _unit_problem(value: object, bound: Any, where: str) -> str | None:
    """Why a figure named for a unit (`_w`, `_s`, ...) is not one.

    One is a number within its bound, or a list or object of them; None: not measured.
    """
    if value is None:
        return None
    if isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _unit_problem(item, bound, f"{where}[{i}]"))), None)
    if isinstance(value, dict):
        return next((p for k, item in value.items() if (p := _unit_problem(item, bound, f"{where}.{k}"))), None)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and abs(value) <= bound.high
    if not ok:
        return f"{where} must be a number of {bound.unit}, at most {bound.high:g} in size (got {value!r:.40})"
    return None


def check_problem(check: dict[str, Any], known: set[str]) -> str | None:
    """Why a check of an earlier acceptance.json cannot be kept as it is written, in one phrase; None if it can.

    acceptance.json is read back as every other file wattwise reads: each check a known name, a status of
    the three, a reason that is text, figures that are figures (numbers within their unit's bound); a
    passed check carries the figures its dependents read.
    """
    name = check.get("name")
    where = f"checks[{name!r}]"
    if name not in known:
        return f"{where} is not a check of this wattwise"
    if check.get("status") not in (PASSED, FAILED, SKIPPED):
        return f"{where}.status must be {PASSED}, {FAILED} or {SKIPPED} (got {check.get('status')!r:.40})"
    for key in ("reason", "kept_from"):
        if check.get(key) is not None and not isinstance(check[key], str):
            return f"{where}.{key} must be text (got {check[key]!r:.40})"
    figures = check.get("figures")
    if figures is not None and not isinstance(figures, dict):
        return f"{where}.figures must be an object of figures (got {type(figures).__name__})"
    if check["status"] == PASSED:
        if not isinstance(figures, dict):
            return f"{where} is marked passed without its figures"
        missing = [key for key in _NEEDED_FIGURES.get(name, ()) if key not in figures]
        if missing:
            return f"{where} is marked passed without its figure {missing[0]}"
        if name == "cap_sweep" and not (
            isinstance(figures["rows"], list)
            and all(isinstance(r, dict) and isinstance(r.get("cap_w"), int | float) for r in figures["rows"])
        ):
            return f"{where}.figures.rows must be a list of rows, each with its cap_w"
    return _figure_problem(figures or {}, f"{where}.figures")


def _run_one(name: str, check: Check, ctx: Context) -> CheckResult:
    try:
        return CheckResult(name, PASSED, figures=dict(check(ctx)))
    except SignalledError as err:  # SIGINT or SIGTERM reached a run inside the check: the whole command stops
        if err.signum == signal.SIGINT:
            raise KeyboardInterrupt(str(err)) from err
        raise SystemExit(128 + err.signum) from err
    except Skip as why:
        return CheckResult(name, SKIPPED, str(why))
    except Failure as err:
        figures = err.args[1] if len(err.args) > 1 and isinstance(err.args[1], dict) else {}
        return CheckResult(name, FAILED, str(err.args[0]), figures)
    except DeviceError as err:
        return CheckResult(name, FAILED, f"{type(err).__name__}: {err}")


def _cuda_index(gpu: Device) -> int:
    """The CUDA index of an NVML GPU: its position among the visible GPUs.

    NVML and CUDA both honour CUDA_VISIBLE_DEVICES through wattwise's discovery, which numbers them in that
    order.
    """
    return int(getattr(gpu, "cuda_index", gpu.index))


def markdown(report: AcceptanceReport) -> str:
    """The report as Markdown, for docs/acceptance/<gpu>-<date>.md."""
    gpu = report["gpu"]["name"] if report["gpu"] else "no NVIDIA GPU"
    if report.get("simulated"):
        gpu += " (simulated: a power model, not a measurement)"
    v = report["versions"]
    lines = [
        f"# wattwise acceptance: {gpu}",
        "",
        f"- time: {report['time']}, host: {report['host']}{' (quick)' if report['quick'] else ''}",
        f"- driver: {v['driver'] or 'unknown'}, NVML: {v['nvml'] or 'unknown'}",
        f"- result: {report['summary'][PASSED]} passed, {report['summary'][FAILED]} failed, "
        f"{report['summary'][SKIPPED]} skipped",
        "",
    ]
    lines += [f"- note: {n}" for n in report["notes"]]
    kept = {c["name"]: f" (kept from {c['kept_from']})" if c.get("kept_from") else "" for c in report["checks"]}
    rows = [[c["name"], f"{c['status']}{kept[c['name']]}", c["reason"] or ""] for c in report["checks"]]
    lines += ["", *markdown_table(["check", "status", "reason"], rows, left=3)]
    compared = preset_rows(report)
    if compared:
        lines += ["", "## Against the simulated GPU's preset", "", *compared]
    for c in report["checks"]:
        if c["figures"]:
            lines += ["", f"## {c['name']}", ""]
            table = levers.section(c["name"], c["figures"]) if c["status"] == PASSED else []
            lines += [*table, ""] if table else []
            lines += ["```json", json_text(c["figures"], indent=1), "```"]
    return "\n".join(lines) + "\n"


def preset_of(gpu_name: str) -> str:
    """The simulated GPU preset for a GPU's name (`h100`, `a100`, `v100`, `mi300x`); h100 when none matches."""
    from wattwise.vocabulary import SimulatedGpuName

    upper = gpu_name.upper()
    return next((g.value for g in SimulatedGpuName if g.value.upper() in upper), SimulatedGpuName.H100.value)


def preset_rows(report: AcceptanceReport) -> list[str]:
    """A table of what the run measured beside the simulated GPU's preset for it; [] when nothing to compare."""
    from wattwise.devices.simulated import PowerModel
    from wattwise.devices.simulated.presets import PRESETS
    from wattwise.vocabulary import SimulatedGpuName

    gpu = report.get("gpu")
    if not gpu or report.get("simulated"):
        return []
    preset = PRESETS[SimulatedGpuName(preset_of(str(gpu["name"])))]
    figures = {c["name"]: c["figures"] for c in report["checks"] if c["status"] == PASSED and c["figures"]}
    rows: list[list[str]] = []

    def row(what: str, measured: float | None, simulated: float, unit: str = "s") -> None:
        shown = "-" if measured is None or not math.isfinite(measured) else f"{measured:.3g} {unit}"
        rows.append([what, shown, f"{simulated:.3g} {unit}"])

    if "energy_counter" in figures:
        row("energy counter period", figures["energy_counter"].get("counter_period_s"), preset.energy_update_period_s)
    if "clock_switch" in figures:
        # The preset's clock acts after its call and settles with a time constant: 95% of the way in 3 of them.
        row(
            "clock-switch latency",
            figures["clock_switch"].get("clock_change_s"),
            preset.clock_set_s + 3 * preset.clock_settle_s,
        )
    settle = figures.get("power_limit", {}).get("settle", {})
    if isinstance(settle, dict) and "settle_s" in settle:
        row("power limit holds within 5%", settle["settle_s"], 3 * preset.power_limit_settle_s)
    clock_rows = figures.get("clocks", {}).get("rows") or []
    if len(clock_rows) >= 2:
        model, top = PowerModel.default(), clock_rows[0]
        curve = preset.clock
        idle, busy = model.idle_power_w, model.busy_power_w[-1]

        def relative_j(mhz: float) -> float:
            x = mhz / top["frequency_mhz"] * curve.max_mhz  # the same share of each GPU's top clock
            return (idle + (busy - idle) * curve.power_factor(x)) * curve.time_factor(x) / busy

        for r in clock_rows[1:]:
            row(
                f"energy per step at {r['frequency_mhz']} MHz, against the highest clock",
                r["energy_j"] / top["energy_j"],
                relative_j(r["frequency_mhz"]),
                unit="x",
            )
    if not rows:
        return []
    title = f"Preset `{preset.name.value}` ({preset.label}):"
    return [title, "", *markdown_table(["figure", "measured", "preset"], rows)]


# -- the SIGKILLed child -------------------------------------------------------------------------------
def spawn_limit_holder(spec: DeviceSpec, watts: float) -> subprocess.Popen[bytes]:
    """A wattwise process that sets `watts` on the GPU of `spec` through the guard, says "ready", and waits."""
    return subprocess.Popen(
        [sys.executable, "-m", "wattwise.tools.acceptance", "--hold-limit", json.dumps(spec), str(watts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def parse_hold_limit(spec_json: str, watts_text: str) -> tuple[DeviceSpec, float]:
    """`--hold-limit SPEC WATTS` read: the device spec (a JSON object) and the limit in W, checked.

    Raises:
        UsageError: SPEC is not a JSON object, or WATTS not a power limit; one line naming which.
    """
    from wattwise.bounds import POWER_LIMIT_W
    from wattwise.errors import UsageError

    try:
        spec = json.loads(spec_json)
    except ValueError as err:
        raise UsageError(f"--hold-limit SPEC: not JSON ({err}); give a device's spec as a JSON object") from None
    if not isinstance(spec, dict):
        raise UsageError(f"--hold-limit SPEC must be a JSON object, a device's spec (got {type(spec).__name__})")
    try:
        watts = float(watts_text)
    except ValueError:
        raise UsageError(f"--hold-limit WATTS: {watts_text[:40]!r} is not a number of watts (e.g. 200)") from None
    # open_spec checks the keys its backend needs (a KeyError, TypeError or ValueError names what is wrong).
    return cast(DeviceSpec, spec), POWER_LIMIT_W.check(watts, "--hold-limit WATTS")


def _hold_limit(spec_json: str, watts_text: str) -> int:
    from wattwise.devices import open_spec
    from wattwise.errors import UsageError
    from wattwise.settings.guard import SettingsGuard

    spec, watts = parse_hold_limit(spec_json, watts_text)
    try:
        gpu = open_spec(spec)
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"--hold-limit SPEC: not a device's spec ({type(err).__name__}: {err})") from None
    guard = SettingsGuard()
    guard.set_power_limit(gpu, watts)
    print("ready", flush=True)
    while True:  # until killed
        time.sleep(1.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m wattwise.acceptance` and `wattwise acceptance`."""
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="wattwise_acceptance",
        help="where acceptance.json and acceptance.md go (wattwise_acceptance)",
    )
    parser.add_argument("--quick", action="store_true", help="shorter loads (about a fifth)")
    parser.add_argument("--gpu", type=int, default=0, metavar="INDEX", help="the GPU to test (0)")
    parser.add_argument(
        "--only", nargs="+", choices=[n for n, _ in all_checks()], metavar="NAME", help="run only these checks"
    )
    parser.add_argument(
        "--levers",
        action="store_true",
        help="run the three lever checks (cap_sweep, tuning_vs_sweep, pipeline_measured) instead, each beside "
        "the published figure it reproduces",
    )
    parser.add_argument(
        "--simulated",
        action="store_true",
        help="with --levers: run them on the simulated GPU (every figure labelled simulated)",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        metavar="S",
        help="skip a check that would not end within S seconds of the start (rerun into --out to resume)",
    )
    parser.add_argument("--fresh", action="store_true", help="run every check again, even those that passed in --out")
    parser.add_argument("--hold-limit", nargs=2, metavar=("SPEC", "WATTS"), help=argparse.SUPPRESS)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the checks the options ask for; print one line per check. Exit 1 when a check failed on a GPU."""
    from wattwise.errors import UsageError

    if args.hold_limit:
        return _hold_limit(args.hold_limit[0], args.hold_limit[1])
    if not 0 <= args.gpu <= MAX_GPU_INDEX:
        raise UsageError(f"--gpu must be a GPU's index, 0 to {MAX_GPU_INDEX} (got {args.gpu}); see `wattwise devices`")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder for acceptance.json and acceptance.md")
    lever_names = [n for n, _ in levers.LEVER_CHECKS]
    if args.levers and args.only and not set(args.only) <= set(lever_names):
        others = ", ".join(n for n in args.only if n not in lever_names)
        raise UsageError(f"--only {others}: not a lever check; with --levers choose from {', '.join(lever_names)}")
    selected = args.only or (lever_names if args.levers else [n for n, _ in CHECKS])
    if args.simulated and not set(selected) <= set(lever_names):
        raise UsageError("--simulated runs only the lever checks; add --levers (or --only a lever check)")
    if args.budget_s is not None and not (math.isfinite(args.budget_s) and args.budget_s > 0):
        raise UsageError(f"--budget-s must be a positive number of seconds (got {args.budget_s:g})")
    gpus = None
    if args.simulated:
        from wattwise.devices import discover

        gpus = discover("simulated", gpu_indices=[args.gpu]).gpus
    report = run_checks(
        out,
        quick=args.quick,
        gpu_index=args.gpu,
        gpus=gpus,
        only=args.only,
        levers_only=args.levers,
        budget_s=args.budget_s,
        fresh=args.fresh,
    )
    for c in report["checks"]:
        kept = f"(kept from {c['kept_from']}; --fresh runs it again)" if c.get("kept_from") else ""
        print(f"{c['name']:17s} {c['status']:8s} {c['reason'] or kept}")
    if report.get("simulated"):
        print("simulated GPU: every figure comes from a power model, not a measurement")
    print(f"report: {out / 'acceptance.json'}, {out / 'acceptance.md'}")
    has_gpu = report["gpu"] is not None
    # A failure of a check not asked for now (left in the folder by an earlier run) is not this run's.
    failed = any(c["status"] == FAILED for c in report["checks"] if c["name"] in selected)
    return 1 if has_gpu and failed else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m wattwise.acceptance`: the same command as `wattwise acceptance`; returns its exit code."""
    from wattwise.cli.main import main as wattwise_main

    return wattwise_main(["acceptance", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
