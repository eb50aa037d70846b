"""Hot-path cost of wattwise: step time, collectives and CUDA syncs per step, in Lightning and Accelerate.

    python benchmarks/hot_path.py [--quick] [--repeats 3] [--processes 1 2] [--frameworks lightning accelerate]
                                  [--modes measure tune [noop measure-nosampler]]
                                  [--step-ms 5 20] [--steps N] [--time-hooks] [--json PATH]
    python benchmarks/hot_path.py --paired-fits [--repeats 3] [--processes 1 2] [--physics ideal realistic]

Each configuration (framework, processes, step time) trains a tiny model whose step busy-waits for 5 or
20 ms with the simulated GPU busy meanwhile (the run's own GPU with wattwise, one of the process's own
without: every mode pays the same for it), without wattwise and with it in mode "measure" and in mode
"tune". Tuning runs on a small profile (3 limits, a few steps each) during the warm-up steps and, the GPU
being driven, chooses a limit; the step lasts as long at any limit, so only the hooks' cost is timed. Only
the steps after tuning are timed, so "tune" shows the steady state once a limit is chosen. Two processes
form a gloo process group on the CPU (Lightning: `strategy="ddp"`; Accelerate: multi-CPU), launched here
with RANK/WORLD_SIZE/MASTER_* set.
wattwise uses the simulated GPU, with its output and WATTWISE_HOME in a temporary folder; step metrics
go to a logger (Lightning) or tracker (Accelerate) that discards them, at the default cadence of 50 steps.

Per configuration and mode it prints the mean and median step time over the timed steps, the overhead
against no wattwise (paired per repeat, then the median of the repeats), and per 1000 timed steps:
- collectives started from wattwise code: calls of the Python-level `torch.distributed` collectives whose
  first caller outside torch, Lightning and Accelerate is a `wattwise`, `lightning_energy` or
  `accelerate_energy` module (DDP's gradient all-reduces run in C++ and are not seen);
- all Python-level collectives, minus those of the same run without wattwise (a cross-check);
- `cuda_sync` calls wattwise makes (`wattwise.run.measurement.cuda_sync` / `wattwise.monitor.cuda_sync`
  replaced by a counter; on the CPU they do nothing anyway) and `torch.cuda.synchronize` calls.
Repeats rotate the order of the modes (each mode in each position equally often over as many repeats as
there are modes) and each run is paired with the same repeat's run without wattwise, against drift; each
figure is the median over repeats, with a 95% confidence interval of the mean paired overhead.

Beside the steps' cost it prints the whole run's (`fit s`: the Trainer or Accelerator built, every step,
the end, as the user waits for it; the slowest process) and its ratio to the same repeat's run without
wattwise (`fit x`), which also counts what a run pays once (finding the devices, writing its files).

Targets, printed beside the figures, not asserted: mode "measure" costs at most 1% at 20 ms steps and 2%
at 5 ms steps in 2 processes, and its whole run at 20 ms steps takes at most 1.01 times as long as
without wattwise; wattwise combines over processes at most once per logging interval
(<= 1000 / 50 = 20 collectives per 1000 steps, besides the ends of the fit and of epochs).
Measured on a 2-core machine shared with other jobs: default run 11.5 minutes, --quick 2.7 minutes.

`--paired-fits` measures instead what a user's own script pays, per step and per fit, as a user would
time it: Lightning's `BoringModel` whose `training_step` sleeps 20 ms (its epochs are 64 batches, 32 per
process in two), `logger=False`, `limit_val_batches=0`, `EnergyCallback(backend="simulated")` in mode
measure, every fit in the same process (one untimed fit first). Per process count and simulated physics
(ideal; realistic, whose counter reads take 2.8 ms as an H100's do), a short (100 steps) and a long (400)
fit with and without the callback, `--repeats` times in rotated order, the minimum of each taken: per
step, `((long on - short on) - (long off - short off)) / 300` (and its share of the step without wattwise);
per fit, what is left of the short fit's difference. Beside them, the counter reads one long fit makes
(each on an H100 costs what the realistic physics' read sleeps: the real NVML path costs the same per
read) and the time they take. About 2 minutes per process count and physics at 3 repeats.

Beside the difference of differences, which one stalled fit moves by several percent on a shared machine,
each long fit's steps are timed where `training_step` starts (rank 0): the k-th step's time is the median of
its repeats' k-th steps, and the per-step cost ("by step") is the mean over the steps of that median with
wattwise less that without. Steps that log or end an epoch fall on the same step indices in every fit, so
their cost is counted; a step that another process stalled in one repeat is not.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import importlib
import itertools
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FRAMEWORKS = ("lightning", "accelerate")
MODES = ("none", "measure", "tune")
#: Diagnostic modes, run only when named in --modes: "noop" adds a Lightning callback that does nothing
#: (Lightning's own cost of dispatching hooks to one more callback; Lightning only);
#: "measure-nosampler" is "measure" without the background power sampler (`monitor.sample_power=false`;
#: a GPU with an energy counter needs none, the simulated one has a counter).
ALL_MODES = ("none", "noop", "measure", "measure-nosampler", "tune")
DIAGNOSTIC_MODES = tuple(m for m in ALL_MODES if m not in MODES)
LOG_EVERY = 50
#: A small tuning profile (limits 300, 200, 100 W on the simulated 300 W GPU): 2 + 3 * (1 + 2) = 11 steps.
TUNE_OVERRIDES = [
    "power_limit.wait_steps=2",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
]
#: Untimed steps before the timed ones, in every mode (tuning is over by then).
WARM_STEPS = 40
#: Timed steps per step time (ms): default and --quick.
DEFAULT_STEPS = {5: 600, 20: 200}
QUICK_STEPS = {5: 200, 20: 100}
#: The Python-level collectives counted (each wrapped in `torch.distributed` and its `distributed_c10d`).
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "gather_object",
    "barrier",
    "reduce",
)
WATTWISE_MODULES = ("wattwise", "lightning_energy", "accelerate_energy")
LIBRARY_MODULES = ("torch", "lightning", "lightning_fabric", "pytorch_lightning", "accelerate")
SYNC_MODULES = ("wattwise.run.measurement", "wattwise.monitor")


# -- counters (installed in each worker process) ----------------------------------------------------------
@dataclass
class Counts:
    """Calls counted in one process so far."""

    collectives: int = 0
    wattwise_collectives: int = 0
    syncs: int = 0
    cuda_synchronize: int = 0
    by_name: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> Counts:
        return dataclasses.replace(self, by_name=dict(self.by_name))

    def minus(self, earlier: Counts) -> dict[str, Any]:
        return {
            "collectives": self.collectives - earlier.collectives,
            "wattwise_collectives": self.wattwise_collectives - earlier.wattwise_collectives,
            "syncs": self.syncs - earlier.syncs,
            "cuda_synchronize": self.cuda_synchronize - earlier.cuda_synchronize,
            "wattwise_by_name": {
                k: v - earlier.by_name.get(k, 0) for k, v in self.by_name.items() if v != earlier.by_name.get(k, 0)
            },
        }


COUNTS = Counts()
_inside = threading.local()


def _module_of(frame: Any) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _started_by_wattwise(frame: Any) -> bool:
    """Whether the first caller outside torch, Lightning and Accelerate is wattwise code."""
    while frame is not None and _module_of(frame).split(".")[0] in LIBRARY_MODULES:
        frame = frame.f_back
    return frame is not None and _module_of(frame).split(".")[0] in WATTWISE_MODULES


def _counted_collective(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_inside, "depth", 0)
        if depth == 0:  # a collective built from others (all_gather_object) counts once
            COUNTS.collectives += 1
            if _started_by_wattwise(sys._getframe(1)):
                COUNTS.wattwise_collectives += 1
                COUNTS.by_name[name] = COUNTS.by_name.get(name, 0) + 1
        _inside.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _inside.depth = depth

    return counted


def _counted_sync(fn: Callable[..., Any], attr: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        setattr(COUNTS, attr, getattr(COUNTS, attr) + 1)
        return fn(*args, **kwargs)

    return counted


def install_counters() -> list[str]:
    """Wrap the collectives, wattwise's `cuda_sync` and `torch.cuda.synchronize`; the names wrapped."""
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    wrapped = []
    for name in COLLECTIVES:
        original = getattr(dist, name, None) or getattr(distributed_c10d, name, None)
        if original is None:
            continue
        counted = _counted_collective(name, original)
        for module in (dist, distributed_c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, counted)
        wrapped.append(f"torch.distributed.{name}")
    for module_name in SYNC_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if callable(getattr(module, "cuda_sync", None)):
            module.cuda_sync = _counted_sync(module.cuda_sync, "syncs")  # type: ignore[attr-defined]
            wrapped.append(f"{module_name}.cuda_sync")
    torch.cuda.synchronize = _counted_sync(torch.cuda.synchronize, "cuda_synchronize")
    wrapped.append("torch.cuda.synchronize")
    return wrapped


# -- one timed run (worker side) -------------------------------------------------------------------------
@dataclass(frozen=True)
class Trial:
    framework: str
    step_ms: int
    mode: str
    steps: int
    repeat: int
    #: A first run per framework, paying first-time costs; not reported.
    warm_up: bool = False

    @property
    def key(self) -> tuple[str, int, str]:
        return self.framework, self.step_ms, self.mode


@dataclass
class Timeline:
    """Step start times, and the counters at the start of the first timed step and after the last one."""

    warm: int
    steps: int
    starts: list[float] = field(default_factory=list)
    window_start_wall: float = 0.0
    at_start: Counts | None = None
    at_end: Counts | None = None
    #: With --time-hooks: seconds EnergyCallback spent in its per-step hooks, per step of the whole run.
    hook_times_s: list[float] = field(default_factory=list)
    #: With --time-hooks: seconds it spent once (built, set up, the fit's and epochs' starts and ends), and
    #: its energy counter reads.
    once_s: float = 0.0
    reads: int = 0

    @property
    def total_steps(self) -> int:
        return self.warm + self.steps + 1  # the last one's start closes the timed window

    def step_started(self) -> None:
        i = len(self.starts)
        if i == self.warm:
            self.at_start = COUNTS.snapshot()
            self.window_start_wall = time.time()
        elif i == self.warm + self.steps:
            self.at_end = COUNTS.snapshot()
        self.starts.append(time.perf_counter())


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class GPUWork:
    """The step's work: busy-wait `work_s` while keeping this process's simulated GPU busy.

    With wattwise (`gpus_of_run` gives its GPUs) the run's own simulated GPU is driven, so tuning measures
    busy power at each limit and chooses one; without it, a simulated GPU of this process's own is driven the
    same way, so every mode pays the same for the emulated work. The step lasts `work_s` whatever the limit:
    the figures are the hooks' cost, not the modelled slowdown of a lower limit.
    """

    def __init__(self, work_s: float, rank: int, state_dir: Path, gpus_of_run: Callable[[], list[Any]]) -> None:
        self.work_s, self.rank, self.state_dir, self.gpus_of_run = work_s, rank, state_dir, gpus_of_run
        self._gpus: list[Any] | None = None

    def _simulations(self) -> list[Any]:
        if self._gpus is None:
            gpus = self.gpus_of_run()
            if not gpus:
                from wattwise.devices import simulated_gpus

                gpus = simulated_gpus(indices=[self.rank], persist_dir=self.state_dir)
            self._gpus = [g.simulation for g in gpus if g.simulation is not None]
        return self._gpus

    def __call__(self) -> None:
        with contextlib.ExitStack() as stack:
            for gpu in self._simulations():
                stack.enter_context(gpu.busy())
            busy_wait(self.work_s)


def _energy_settings(trial: Trial, out_dir: Path) -> dict[str, Any]:
    overrides = [f"devices.simulated.state_dir={out_dir.parent / 'simulated'}"]
    if trial.mode == "tune":
        overrides += TUNE_OVERRIDES
    mode = trial.mode
    if mode == "measure-nosampler":
        mode, overrides = "measure", [*overrides, "monitor.sample_power=false"]
    return {"mode": mode, "backend": "simulated", "output_dir": str(out_dir), "overrides": overrides}


def _uses_wattwise(mode: str) -> bool:
    return mode not in ("none", "noop")


def run_lightning(
    trial: Trial, world_size: int, out_dir: Path, time_hooks: bool = False
) -> tuple[Timeline, dict[str, Any] | None, int]:
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
    from lightning.pytorch.loggers import Logger
    from torch.utils.data import DataLoader

    from lightning_energy import EnergyCallback

    timeline = Timeline(WARM_STEPS, trial.steps)
    callback: pl.Callback | None = None
    work = GPUWork(
        trial.step_ms / 1000,
        int(os.environ.get("LOCAL_RANK", "0")),
        out_dir.parent / "simulated-own",
        lambda: list(getattr(getattr(callback, "run", None), "gpus", None) or []),
    )

    class TimedModel(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            timeline.step_started()
            out = super().training_step(batch, batch_idx)
            work()
            return out

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(RandomDataset(32, 2 * world_size * (timeline.total_steps + 5)), batch_size=2)

    class DiscardLogger(Logger):
        """Takes the metrics and drops them: the callback's logging path runs, at no I/O cost."""

        calls = 0

        @property
        def name(self) -> str:
            return "discard"

        @property
        def version(self) -> int:
            return 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            DiscardLogger.calls += 1

    class NoopCallback(pl.Callback):
        """Every hook Lightning's base class has, doing nothing: the cost of one more callback."""

    if trial.mode == "noop":
        callback = NoopCallback()
    elif _uses_wattwise(trial.mode):
        if time_hooks:  # the callback's own per-step hooks timed around themselves
            from hook_cost import TimedCallback

            callback = TimedCallback(**_energy_settings(trial, out_dir))
            timeline.hook_times_s = callback.per_step_s
        else:
            callback = EnergyCallback(**_energy_settings(trial, out_dir))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world_size,
        strategy="ddp" if world_size > 1 else "auto",
        max_steps=timeline.total_steps,
        max_epochs=1,
        logger=DiscardLogger(),
        log_every_n_steps=LOG_EVERY,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[callback] if callback is not None else [],
    )
    trainer.fit(TimedModel())
    if time_hooks and hasattr(callback, "once_s"):
        timeline.once_s, timeline.reads = callback.once_s, callback.reads
    summary = callback.summary if isinstance(callback, EnergyCallback) else None
    return timeline, summary, DiscardLogger.calls


def run_accelerate(trial: Trial, world_size: int, out_dir: Path) -> tuple[Timeline, dict[str, Any] | None, int]:
    import torch
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker
    from torch.utils.data import DataLoader

    from accelerate_energy import EnergyPlugin, attach, energy_run

    try:
        from accelerate.test_utils.training import RegressionDataset, RegressionModel
    except ImportError:  # older Accelerate: the same two-parameter regression
        RegressionModel, RegressionDataset = _regression_model(), _regression_dataset()

    timeline = Timeline(WARM_STEPS, trial.steps)

    class DiscardTracker(GeneralTracker):
        """Takes the metrics and drops them: the adapter's logging path runs, at no I/O cost."""

        name = "discard"
        requires_logging_directory = False
        calls = 0

        @property
        def tracker(self) -> None:
            return None

        def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
            DiscardTracker.calls += 1

    class KeepGroupAccelerator(Accelerator):
        """`end_training` without destroying the process group, so one worker runs many trials."""

        def end_training(self) -> None:
            for tracker in self.trackers:
                tracker.finish()

    accelerator = KeepGroupAccelerator(cpu=True, log_with=[DiscardTracker()])
    if _uses_wattwise(trial.mode):
        attach(accelerator, EnergyPlugin(enabled=True, **_energy_settings(trial, out_dir)))
    accelerator.init_trackers("hot_path")
    model = RegressionModel(a=1, b=1)
    model.first_batch = False  # its first forward prints the dtypes
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(RegressionDataset(length=2 * world_size * (timeline.total_steps + 5), seed=0), batch_size=2)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    work = GPUWork(
        trial.step_ms / 1000,
        accelerator.local_process_index,
        out_dir.parent / "simulated-own",
        lambda: list(getattr(energy_run(accelerator), "gpus", None) or []),
    )
    for i, batch in enumerate(data):
        if i == timeline.total_steps:
            break
        timeline.step_started()
        loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
        accelerator.backward(loss)
        work()
        optimizer.step()
        optimizer.zero_grad()
    run = energy_run(accelerator)
    steps_seen = run.step_count if run is not None else None
    accelerator.end_training()
    summary = None if run is None else (run.summary or {})
    if summary is not None:
        summary = {**summary, "wattwise_steps": steps_seen}
    return timeline, summary, DiscardTracker.calls


def _regression_model() -> Any:
    import torch

    class RegressionModel(torch.nn.Module):
        def __init__(self, a: float = 0, b: float = 0) -> None:
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor(float(a)))
            self.b = torch.nn.Parameter(torch.tensor(float(b)))
            self.first_batch = False

        def forward(self, x: Any) -> Any:
            return x * self.a + self.b

    return RegressionModel


def _regression_dataset() -> Any:
    import numpy as np

    class RegressionDataset:
        def __init__(self, length: int = 64, seed: int | None = None) -> None:
            rng = np.random.default_rng(seed)
            self.x = rng.normal(size=(length,)).astype(np.float32)
            self.y = 2 * self.x + 3 + rng.normal(scale=0.1, size=(length,)).astype(np.float32)

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": self.x[i], "y": self.y[i]}

    return RegressionDataset


def _tuned_before(summary: dict[str, Any] | None, wall: float) -> bool | None:
    """Whether tuning had chosen and applied its limit before the timed steps (None: cannot tell)."""
    try:
        assert summary is not None
        if summary["power_limit"]["chosen_power_limit_w"] is None:
            return False
        return all(float(e["timestamp"]) <= wall for e in summary.get("settings_timeline", []))
    except (AssertionError, KeyError, TypeError, ValueError):
        return None


def run_trial(trial: Trial, world_size: int, out_dir: Path, time_hooks: bool = False) -> dict[str, Any]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # counted, but outside the timed steps
    gc.collect()  # what the run before left for the collector is not this run's cost
    before = COUNTS.snapshot()
    fit_start = time.perf_counter()
    if trial.framework == "lightning":
        timeline, summary, logged = run_lightning(trial, world_size, out_dir, time_hooks)
    else:
        timeline, summary, logged = run_accelerate(trial, world_size, out_dir)
    fit_s = time.perf_counter() - fit_start
    hooks = timeline.hook_times_s
    if timeline.at_start is None or timeline.at_end is None or len(timeline.starts) < timeline.total_steps:
        raise RuntimeError(f"{trial}: ran {len(timeline.starts)} of {timeline.total_steps} steps")
    timed = timeline.starts[timeline.warm : timeline.warm + trial.steps + 1]
    periods = [b - a for a, b in itertools.pairwise(timed)]
    return {
        "trial": dataclasses.asdict(trial),
        "mean_s": (timed[-1] - timed[0]) / trial.steps,
        # The whole run as the user waits for it: the Trainer (or Accelerator) built, every step, the end.
        "fit_s": fit_s,
        "median_s": statistics.median(periods),
        "window": timeline.at_end.minus(timeline.at_start),
        "whole_run": COUNTS.snapshot().minus(before),
        "tuned_before_window": _tuned_before(summary, timeline.window_start_wall) if trial.mode == "tune" else None,
        "wattwise_steps": summary.get("wattwise_steps", summary.get("steps")) if summary else None,
        "log_calls": logged,
        "hook_us": (
            {
                "median": 1e6 * statistics.median(hooks),
                "mean": 1e6 * statistics.fmean(hooks),
                "steps": len(hooks),
                "once": 1e6 * timeline.once_s,
                "reads": timeline.reads,
            }
            if hooks
            else None
        ),
    }


def worker(spec_path: str) -> None:
    import torch
    import torch.distributed as dist

    spec = json.loads(Path(spec_path).read_text())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "accelerate", "wattwise"):
        logging.getLogger(name).setLevel(logging.ERROR)
    torch.set_num_threads(1)
    if world_size > 1:
        dist.init_process_group("gloo")
    wrapped = install_counters()
    results = []
    for i, raw in enumerate(spec["trials"]):
        trial = Trial(**raw)
        result = run_trial(trial, world_size, Path(spec["tmp"]) / f"run-{i}", bool(spec.get("time_hooks")))
        results.append(result)
        if rank == 0:
            print(
                f"[{i + 1}/{len(spec['trials'])}] {trial.framework} {trial.step_ms} ms {trial.mode}: "
                f"{result['mean_s'] * 1000:.3f} ms/step",
                file=sys.stderr,
                flush=True,
            )
    Path(spec["out"].format(rank=rank)).write_text(json.dumps({"wrapped": wrapped, "results": results}))
    if world_size > 1:
        dist.destroy_process_group()


# -- paired short and long fits: a user's own script ------------------------------------------------------
PAIRED_STEPS = (100, 400)
PAIRED_STEP_S = 0.02


@dataclass(frozen=True)
class PairedFit:
    """One fit of `--paired-fits`: its steps, whether wattwise measures it, the physics, the repeat."""

    steps: int
    measured: bool
    physics: str
    repeat: int


def plan_paired(physics: Sequence[str], repeats: int) -> list[PairedFit]:
    """Each repeat runs the four fits of each physics in an order rotated by one from the last repeat's."""
    fits: list[PairedFit] = []
    for r in range(repeats):
        for phys in physics:
            four = [PairedFit(n, on, phys, r) for n in PAIRED_STEPS for on in (False, True)]
            fits += four[r % 4 :] + four[: r % 4]
    return fits


def paired_worker(spec_path: str) -> None:
    """Every fit of the spec in this process, as a user's script would run them; rank 0 writes the times."""
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    from lightning_energy import EnergyCallback
    from wattwise.devices.simulated import SimulatedGPU

    spec = json.loads(Path(spec_path).read_text())
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "wattwise"):
        logging.getLogger(name).setLevel(logging.ERROR)
    reads = {"count": 0, "seconds": 0.0}
    energy_j = SimulatedGPU.energy_j

    def counted_energy_j(self: Any) -> float:
        # What the training thread waits for: the reader thread's reads (epoch ends) are not counted.
        if threading.current_thread() is not threading.main_thread():
            return energy_j(self)
        started = time.perf_counter()
        try:
            return energy_j(self)
        finally:
            reads["count"] += 1
            reads["seconds"] += time.perf_counter() - started

    SimulatedGPU.energy_j = counted_energy_j  # type: ignore[method-assign]

    stamps: list[float] = []

    class SleepingModel(BoringModel):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            stamps.append(time.perf_counter())
            time.sleep(PAIRED_STEP_S)
            return super().training_step(batch, batch_idx)

    def fit(steps: int, measured: bool, physics: str, out: Path) -> tuple[float, int, float]:
        callbacks = []
        if measured:
            overrides = [f"devices.simulated_physics={physics}", *spec.get("overrides", [])]
            callbacks.append(EnergyCallback(backend="simulated", output_dir=str(out), overrides=overrides))
        trainer = pl.Trainer(
            max_steps=steps,
            logger=False,
            limit_val_batches=0,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=callbacks,
            accelerator="cpu",
            devices=world_size,
            strategy="ddp" if world_size > 1 else "auto",
        )
        reads.update(count=0, seconds=0.0)
        stamps.clear()
        started = time.perf_counter()
        trainer.fit(SleepingModel())
        return time.perf_counter() - started, int(reads["count"]), float(reads["seconds"])

    tmp = Path(spec["tmp"])
    fit(20, True, "realistic", tmp / "warm-up")
    results = []
    for i, raw in enumerate(spec["fits"]):
        one = PairedFit(**raw)
        wall_s, count, read_s = fit(one.steps, one.measured, one.physics, tmp / f"fit-{i}")
        steps_s = [b - a for a, b in itertools.pairwise(stamps)] if one.steps == max(PAIRED_STEPS) else []
        results.append({**raw, "wall_s": wall_s, "reads": count, "read_s": read_s, "steps_s": steps_s})
    if int(os.environ.get("RANK", "0")) == 0:
        Path(spec["out"]).write_text(json.dumps(results))


def paired_figures(results: list[dict[str, Any]], physics: str) -> dict[str, float]:
    """Per-step and per-fit cost from the minimum wall time of each of the four fits of one physics."""
    short, long_ = PAIRED_STEPS
    best = {
        (n, on): min(r["wall_s"] for r in results if (r["steps"], r["measured"], r["physics"]) == (n, on, physics))
        for n in PAIRED_STEPS
        for on in (False, True)
    }
    base_step_s = (best[(long_, False)] - best[(short, False)]) / (long_ - short)
    per_step_s = ((best[(long_, True)] - best[(short, True)]) - (best[(long_, False)] - best[(short, False)])) / (
        long_ - short
    )
    long_on = [r for r in results if (r["steps"], r["measured"], r["physics"]) == (long_, True, physics)]
    long_off = [r for r in results if (r["steps"], r["measured"], r["physics"]) == (long_, False, physics)]
    by_step = {on: _median_steps(fits) for on, fits in ((True, long_on), (False, long_off))}
    n = min(len(by_step[True]), len(by_step[False]))
    on_s, off_s = sum(by_step[True][:n]) / max(1, n), sum(by_step[False][:n]) / max(1, n)
    return {
        "by_step_ms": 1e3 * (on_s - off_s),
        "by_step_pct": 100 * (on_s - off_s) / off_s if off_s > 0 else float("nan"),
        "base_step_ms": 1e3 * base_step_s,
        "per_step_ms": 1e3 * per_step_s,
        "per_step_pct": 100 * per_step_s / base_step_s,
        "per_fit_s": (best[(short, True)] - best[(short, False)]) - short * per_step_s,
        "reads_per_long_fit": statistics.median(r["reads"] for r in long_on),
        "read_ms_per_long_fit": 1e3 * statistics.median(r["read_s"] for r in long_on),
    }


def _median_steps(fits: list[dict[str, Any]], skip: int = 5) -> list[float]:
    """The k-th step's time, the median of the fits' k-th steps, for every k past the first `skip`."""
    runs = [r["steps_s"][skip:] for r in fits if r.get("steps_s")]
    if not runs:
        return []
    n = min(len(r) for r in runs)
    return [statistics.median(r[k] for r in runs) for k in range(n)]


def run_paired(
    processes: Sequence[int],
    physics: Sequence[str],
    repeats: int,
    timeout_s: float,
    json_path: str | None = None,
    overrides: Sequence[str] = (),
) -> int:
    """`--paired-fits`: launch each process count's fits, print per-step and per-fit costs."""
    fits = plan_paired(physics, repeats)
    rows: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wattwise-paired-fits-") as tmp:
        for world_size in processes:
            group = Path(tmp) / f"procs{world_size}"
            group.mkdir()
            spec = group / "spec.json"
            out = group / "results.json"
            spec.write_text(
                json.dumps(
                    {
                        "fits": [dataclasses.asdict(f) for f in fits],
                        "tmp": str(group),
                        "out": str(out),
                        "overrides": list(overrides),
                    }
                )
            )
            print(f"{len(fits)} fits in {world_size} process(es)...", file=sys.stderr, flush=True)
            _start_workers(world_size, ["--paired-worker", str(spec)], group, Path(tmp) / "home", timeout_s)
            results = json.loads(out.read_text())
            rows += [{"processes": world_size, "physics": p, **paired_figures(results, p)} for p in physics]
            every += [{"processes": world_size, **r} for r in results]
    print(
        f"paired fits (BoringModel, {PAIRED_STEP_S * 1e3:.0f} ms sleep per step, logger=False, no validation, "
        f"mode measure, fits in one process): {' and '.join(map(str, PAIRED_STEPS))} steps, minimum of {repeats}"
    )
    print(
        f"{'procs':>5} {'physics':>9} {'step ms':>8} {'per step':>9} {'share':>7} {'by step':>9} {'share':>7} "
        f"{'per fit':>8} {'reads':>6} {'read ms':>8}"
    )
    for r in rows:
        print(
            f"{r['processes']:>5} {r['physics']:>9} {r['base_step_ms']:>8.2f} {r['per_step_ms']:>7.3f}ms "
            f"{r['per_step_pct']:>+6.2f}% {r['by_step_ms']:>7.3f}ms {r['by_step_pct']:>+6.2f}% "
            f"{r['per_fit_s'] * 1e3:>6.0f}ms {r['reads_per_long_fit']:>6.0f} "
            f"{r['read_ms_per_long_fit']:>8.1f}"
        )
    print("reads, read ms: the energy-counter reads the training thread made in the longer fit, and their time")
    if json_path:
        Path(json_path).write_text(json.dumps({"rows": rows, "fits": every}, indent=1))
    print("by step: the mean over the long fit's steps of each step's median over the repeats, with less without")
    print("target: at most 1% per step (per step is the difference of differences: a few tenths of a % of noise)")
    return 0


# -- coordinator -------------------------------------------------------------------------------------------
def plan_trials(
    frameworks: Sequence[str], step_ms: Sequence[int], steps: dict[int, int], repeats: int, modes: Sequence[str] = MODES
) -> list[Trial]:
    """One short warm-up run per framework, then each repeat with the modes in rotated order.

    Repeat r of each configuration starts at its r-th mode, so over n repeats every mode runs in every
    position equally often: a run is affected by the one before it (the machine's state, what the last
    run left to collect), and no mode may always come first or last."""
    modes = tuple(m for m in ALL_MODES if m in modes or m == "none")
    trials = [Trial(fw, min(step_ms), "measure", 20, -1, warm_up=True) for fw in frameworks]
    for r in range(repeats):
        for fw in frameworks:
            # no hooks to dispatch outside Lightning: "noop" would be "none" again
            mine = [m for m in modes if not (m == "noop" and fw != "lightning")]
            order = mine[r % len(mine) :] + mine[: r % len(mine)]
            trials += [Trial(fw, ms, mode, steps[ms], r) for ms in step_ms for mode in order]
    return trials


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    world_size: int, trials: list[Trial], tmp: Path, timeout_s: float, time_hooks: bool = False
) -> list[dict[str, Any]]:
    """Run `trials` in `world_size` fresh worker processes; every rank's results."""
    group = tmp / f"procs{world_size}"
    group.mkdir()
    spec = group / "spec.json"
    out = str(group / "results-rank{rank}.json")
    spec.write_text(
        json.dumps(
            {"trials": [dataclasses.asdict(t) for t in trials], "tmp": str(group), "out": out, "time_hooks": time_hooks}
        )
    )
    _start_workers(world_size, ["--worker", str(spec)], group, tmp / "home", timeout_s)
    return [json.loads(Path(out.format(rank=r)).read_text()) for r in range(world_size)]


def _start_workers(world_size: int, worker_args: list[str], group: Path, home: Path, timeout_s: float) -> None:
    """`world_size` fresh processes of this script with `worker_args`, a process group's variables set; wait."""
    port = free_port()
    procs, logs = [], []
    for rank in range(world_size):
        env = {**os.environ, "WATTWISE_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        env.pop("ACCELERATE_ENERGY", None)
        if world_size > 1:
            env.update(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world_size),
                NODE_RANK="0",
                LOCAL_WORLD_SIZE=str(world_size),
            )
        log_path = group / f"rank{rank}.log"
        logs.append(log_path)
        with open(log_path, "w") as log_file:
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, *worker_args],
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + timeout_s
    failed = False
    for proc in procs:
        try:
            failed |= proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0
        except subprocess.TimeoutExpired:
            failed = True
    if failed:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        tail = "\n".join(
            f"--- rank {r} ---\n" + "\n".join(p.read_text().splitlines()[-30:]) for r, p in enumerate(logs)
        )
        raise RuntimeError(f"{world_size}-process workers failed or timed out:\n{tail}")


def per_1000(count: float, steps: int) -> float:
    return 1000 * count / steps


def hook_figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    """With --time-hooks: the callback's own µs per step (median step, and mean with the logging steps),
    the slowest process's, median over repeats; nothing for runs without it."""
    timed = [[h for h in t.get("hooks_per_rank", []) if h] for t in runs]
    if not all(timed) or not timed:
        return {}
    return {
        f"hook_{k}_us": statistics.median(max(h[k] for h in hooks) for hooks in timed)
        for k in ("median", "mean", "once")
        if all(k in h for hooks in timed for h in hooks)
    } | {"reads": statistics.median(max(h.get("reads", 0) for h in hooks) for hooks in timed)}


def summarise(world_size: int, per_rank: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (framework, step time, mode): medians over repeats; counts are each process's largest."""
    trials = []
    for i, result in enumerate(per_rank[0]["results"]):
        if result["trial"]["warm_up"]:
            continue
        counts = [r["results"][i]["window"] for r in per_rank]
        trials.append(
            {
                **result,
                "counts": {
                    k: max(c[k] for c in counts)
                    for k in ("collectives", "wattwise_collectives", "syncs", "cuda_synchronize")
                },
                "hooks_per_rank": [r["results"][i].get("hook_us") for r in per_rank],
                # The slowest process's whole run (under DDP the processes wait for each other anyway).
                "fit_s": max(r["results"][i]["fit_s"] for r in per_rank),
            }
        )
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for t in trials:
        groups.setdefault(Trial(**t["trial"]).key, []).append(t)
    rows = []
    for (fw, ms, mode), runs in groups.items():
        base = {t["trial"]["repeat"]: t for t in groups.get((fw, ms, "none"), [])}
        steps = runs[0]["trial"]["steps"]

        def median_per_1000(key: str, runs: list[dict[str, Any]] = runs, steps: int = steps) -> float:
            return per_1000(statistics.median(t["counts"][key] for t in runs), steps)

        paired = [(t, base[t["trial"]["repeat"]]) for t in runs if t["trial"]["repeat"] in base]
        tuned = [t["tuned_before_window"] for t in runs]
        diffs = [100 * (t["mean_s"] / b["mean_s"] - 1) for t, b in paired] if mode != "none" else []
        fit_ratios = [t["fit_s"] / b["fit_s"] for t, b in paired] if mode != "none" else []
        rows.append(
            {
                "framework": fw,
                "processes": world_size,
                "step_ms": ms,
                "mode": mode,
                "timed_steps": steps,
                "repeats": len(runs),
                "mean_ms": 1000 * statistics.median(t["mean_s"] for t in runs),
                "median_ms": 1000 * statistics.median(t["median_s"] for t in runs),
                "overhead_pct": statistics.median(diffs) if diffs else None,
                "overhead_median_pct": (
                    statistics.median(100 * (t["median_s"] / b["median_s"] - 1) for t, b in paired)
                    if mode != "none" and paired
                    else None
                ),
                "overhead_per_repeat_pct": diffs,
                "fit_s": statistics.median(t["fit_s"] for t in runs),
                "fit_ratio": statistics.median(fit_ratios) if fit_ratios else None,
                "fit_ratio_per_repeat": fit_ratios,
                "fit_ratio_ci95": (
                    None
                    if len(fit_ratios) < 2
                    else [1 + x / 100 for x in ci95([100 * (f - 1) for f in fit_ratios]) or []]
                ),
                "overhead_ci95_pct": ci95(diffs),
                "wattwise_collectives_per_1000": median_per_1000("wattwise_collectives"),
                "collectives_minus_none_per_1000": (
                    median_per_1000("collectives")
                    - per_1000(statistics.median(b["counts"]["collectives"] for _, b in paired), steps)
                    if paired
                    else None
                ),
                "syncs_per_1000": median_per_1000("syncs"),
                "cuda_synchronize_per_1000": median_per_1000("cuda_synchronize"),
                "tuned_before_timed_steps": None if mode != "tune" else all(x is True for x in tuned),
                "log_calls": [t["log_calls"] for t in runs],
                **hook_figures(runs),
            }
        )
    order = {m: i for i, m in enumerate(ALL_MODES)}
    rows.sort(key=lambda r: (FRAMEWORKS.index(r["framework"]), r["step_ms"], order[r["mode"]]))
    return rows


def ci95(diffs: Sequence[float]) -> list[float] | None:
    """A 95% confidence interval of the mean paired overhead (Student's t over repeats); None under 2 repeats.

    The machine's speed drifts by a few % over minutes, more than the overheads measured; pairing each run
    with the adjacent run without wattwise removes the drift, and the interval says what is left."""
    if len(diffs) < 2:
        return None
    from scipy import stats

    mean, sem = statistics.fmean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5
    half = float(stats.t.ppf(0.975, len(diffs) - 1)) * sem
    return [mean - half, mean + half]


def verdict(ci: list[float] | None, point: float, limit: float) -> str:
    """'met' when the whole interval is under the limit, 'MISSED' when it is all above, else 'unresolved'."""
    if ci is None:
        return "met" if point <= limit else "MISSED"
    if ci[1] <= limit:
        return "met"
    return "MISSED" if ci[0] > limit else "unresolved"


def targets(row: dict[str, Any]) -> str:
    if row["mode"] == "none":
        return ""
    notes = []
    if row["mode"] == "measure" and row["processes"] == 2 and row["step_ms"] in (5, 20):
        limit = 1.0 if row["step_ms"] == 20 else 2.0
        notes.append(f"time<={limit:g}% {verdict(row.get('overhead_ci95_pct'), row['overhead_pct'], limit)}")
        if row["step_ms"] == 20 and row.get("fit_ratio") is not None:
            ci = row.get("fit_ratio_ci95")
            fit = verdict([100 * (x - 1) for x in ci] if ci else None, 100 * (row["fit_ratio"] - 1), FIT_LIMIT_PCT)
            notes.append(f"fit<={1 + FIT_LIMIT_PCT / 100:g}x {fit}")
    if row["processes"] > 1:
        limit = 1000 / LOG_EVERY
        notes.append(f"coll<={limit:g} {'met' if row['wattwise_collectives_per_1000'] <= limit else 'MISSED'}")
    if row["tuned_before_timed_steps"] is False:
        notes.append("TUNING NOT OVER BEFORE TIMED STEPS")
    return "; ".join(notes)


#: The whole run in mode "measure" (2 processes, 20 ms steps) takes at most this much longer than without wattwise.
FIT_LIMIT_PCT = 1.0


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def _fmt_ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:+.2f},{ci[1]:+.2f}]%"


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'framework':<10} {'procs':>5} {'step':>5} {'mode':<17} {'mean ms':>8} {'med ms':>8} {'ovh mean':>9} "
        f"{'ovh med':>8} {'95% CI (mean)':>16} {'fit s':>7} {'fit x':>7} {'coll/1k':>8} {'Δall/1k':>8} "
        f"{'sync/1k':>8} {'cuda/1k':>8}  targets"
    )
    for r in rows:
        watt = _uses_wattwise(r["mode"])
        print(
            f"{r['framework']:<10} {r['processes']:>5} {r['step_ms']:>3}ms {r['mode']:<17} {r['mean_ms']:>8.3f} "
            f"{r['median_ms']:>8.3f} {_fmt(r['overhead_pct'], '+.2f', '%'):>9} "
            f"{_fmt(r['overhead_median_pct'], '+.2f', '%'):>8} {_fmt_ci(r.get('overhead_ci95_pct')):>16} "
            f"{r['fit_s']:>7.2f} {_fmt(r.get('fit_ratio'), '.3f'):>7} "
            f"{_fmt(r['wattwise_collectives_per_1000'] if watt else None, '8.1f'):>8} "
            f"{_fmt(r['collectives_minus_none_per_1000'] if watt else None, '8.1f'):>8} "
            f"{_fmt(r['syncs_per_1000'] if watt else None, '8.1f'):>8} "
            f"{_fmt(r['cuda_synchronize_per_1000'] if watt else None, '8.1f'):>8}  {targets(r)}"
        )
    for r in rows:
        if "hook_median_us" in r:
            print(
                f"{r['framework']} {r['processes']} process(es) {r['step_ms']} ms {r['mode']}: EnergyCallback's "
                f"per-step hooks {r['hook_median_us']:.1f} µs per step (median), {r['hook_mean_us']:.1f} µs "
                "per step on average with the logging steps; once per fit (built, set up, the fit's and epochs' "
                f"starts and ends, the summary) {r.get('hook_once_us', 0) / 1000:.1f} ms, with "
                f"{r['reads']:.0f} energy counter reads (slowest process, median over repeats)"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 repeat, few steps (~2-3 min)")
    parser.add_argument("--repeats", type=int, default=None, help="runs per configuration (default 3; --quick 1)")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed steps per run (default 600 at 5 ms, 200 at 20 ms; --quick 200 and 100)",
    )
    parser.add_argument("--step-ms", type=int, nargs="+", default=[5, 20], help="step times in ms (default 5 20)")
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=ALL_MODES,
        default=list(MODES),
        help=f"modes to run besides 'none' (default: measure tune; diagnostic: {' '.join(DIAGNOSTIC_MODES)})",
    )
    parser.add_argument("--processes", type=int, nargs="+", choices=(1, 2), default=[1, 2])
    parser.add_argument(
        "--time-hooks",
        action="store_true",
        help="also time EnergyCallback's per-step hooks in each process (Lightning; the callback "
        "of benchmarks/hook_cost.py, which adds timer calls to its hooks and state_key)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every run and the table as JSON")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process count (default 1800)")
    parser.add_argument(
        "--paired-fits",
        action="store_true",
        help="per-step and per-fit cost from paired short and long fits of a user's own script (see above)",
    )
    parser.add_argument(
        "--physics", nargs="+", choices=("ideal", "realistic"), default=["ideal", "realistic"],
        help="with --paired-fits: the simulated GPU's physics (default both)",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="with --paired-fits: a setting for the measured fits (repeatable), e.g. monitor.sample_power=false",
    )  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--paired-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return 0
    if args.paired_worker:
        paired_worker(args.paired_worker)
        return 0
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if args.paired_fits:
        if repeats < 1:
            parser.error("--repeats must be at least 1")
        return run_paired(args.processes, args.physics, repeats, args.timeout, args.json, args.set)
    if repeats < 1 or (args.steps is not None and args.steps < 1) or min(args.step_ms) < 1:
        parser.error("--repeats, --steps and --step-ms must be at least 1")
    table = QUICK_STEPS if args.quick else DEFAULT_STEPS
    steps = {ms: args.steps or table.get(ms, max(50, (1000 if args.quick else 3000) // ms)) for ms in args.step_ms}
    trials = plan_trials(args.frameworks, args.step_ms, steps, repeats, args.modes)

    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="wattwise-hot-path-") as tmp:
        for world_size in args.processes:
            print(f"running {len(trials)} runs in {world_size} process(es)...", file=sys.stderr, flush=True)
            per_rank = launch(world_size, trials, Path(tmp), args.timeout, args.time_hooks)
            raw[str(world_size)] = per_rank
            rows += summarise(world_size, per_rank)
    elapsed = time.perf_counter() - start

    print(
        f"wattwise hot path (simulated GPU, CPU, gloo): repeats={repeats}, timed steps "
        f"{', '.join(f'{n} at {ms} ms' for ms, n in steps.items())}, {WARM_STEPS} untimed steps first "
        f"(tuning: {' '.join(TUNE_OVERRIDES)}), logging every {LOG_EVERY} steps"
    )
    print(
        "ovh: overhead against no wattwise (paired per repeat; median over repeats of the mean and of the "
        "median step time); 95% CI: confidence interval of the mean paired overhead of the mean step time "
        "(a target is 'met' when the interval lies under it, 'unresolved' when it straddles it); "
        "fit s, fit x: the whole run (Trainer built, warm-up and timed steps, the end; the slowest process) "
        "and its ratio to the run without wattwise (paired, median over repeats), beside the steps' cost; "
        "coll/1k: collectives started by wattwise code per 1000 steps; Δall/1k: all Python-level "
        "collectives minus those without wattwise; sync/1k: wattwise cuda_sync calls; cuda/1k: "
        "torch.cuda.synchronize calls"
    )
    print_table(rows)
    print(f"total time {elapsed:.0f} s")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "repeats": repeats,
                    "steps": steps,
                    "warm_steps": WARM_STEPS,
                    "tune_overrides": TUNE_OVERRIDES,
                    "log_every_n_steps": LOG_EVERY,
                    "elapsed_s": elapsed,
                    "rows": rows,
                    "runs": raw,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
