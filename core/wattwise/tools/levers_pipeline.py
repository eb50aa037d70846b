"""The pipeline checks: two stages profiled with `PipelineProfiler`, then `wattwise frontier` and `wattwise plan`.

`profile_and_plan` is that one check; the hardware check `pipeline` stops there, and lever 3,
`pipeline_measured` (Perseus, SOSP'24), then runs each stage's instruction sequence under the no-slowdown
plan by the `FrequencyController` (clocks locked through the settings guard) and at the maximum clock:
measured time and energy against the plan's prediction. On one GPU the stages run one after the other; the
iteration is composed from the measured instruction times by the schedule's DAG, and its energy is the
stages' measured energy plus the blocking power over the time a stage waits.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise.devices.base import Device, DeviceError, NoPermissionError
from wattwise.pipeline.schedule import FORWARD
from wattwise.tools.checks import markdown_table
from wattwise.tools.levers_common import (
    PERSEUS_CLAIM,
    PIPELINE_MICROBATCHES,
    PIPELINE_RUN_ITERATIONS,
    PIPELINE_SCHEDULE,
    PROFILE_WINDOW_SPREAD,
    Sizes,
    label,
)
from wattwise.tools.levers_figures import IterationFigures, PipelineFigures
from wattwise.tools.levers_rig import Rig

if TYPE_CHECKING:
    from wattwise.frequency.controller import FrequencyController
    from wattwise.frequency.profiler import StageWork
    from wattwise.pipeline.files import PlanJson
    from wattwise.pipeline.schedule import Step
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import Context

#: A measured instruction: (stage, "forward" or "backward", microbatch).
InstructionKey = tuple[int, str, int]


def pipeline_clocks_mhz(supported: Sequence[int], count: int) -> list[int]:
    """`count` supported SM clocks from the highest down to about half of it, evenly spread, highest first."""
    ordered = sorted(set(supported), reverse=True)
    top = ordered[0]
    usable = [f for f in ordered if f >= top / 2] or ordered
    if len(usable) <= count:
        return usable
    picks = {usable[round(i * (len(usable) - 1) / (count - 1))] for i in range(count)}
    return sorted(picks, reverse=True)


def pipeline_table(figures: PipelineFigures) -> list[str]:
    """Markdown: the plan's predicted and measured iteration, and the saving against all at the maximum clock."""
    measured = label(figures)
    p, m = figures["predicted"], figures["measured"]
    lines = [
        f"{PERSEUS_CLAIM}. Here: {figures['stages']} stages, {figures['microbatches']} microbatches, "
        f"{figures['schedule']}, {measured} on {figures['gpu']}. {figures['composition']}",
        "",
    ]
    header = ["", "iteration time (s)", "iteration energy (J)", "saving vs maximum clock", "slowdown"]

    def planned(what: str, it: IterationFigures) -> list[str]:
        return [
            what,
            f"{it['plan_time_s']:.4g}",
            f"{it['plan_energy_j']:.4g}",
            f"{it['saving']:.1%}",
            f"{it['slowdown']:.1%}",
        ]

    def at_max(what: str, it: IterationFigures) -> list[str]:
        return [what, f"{it['max_time_s']:.4g}", f"{it['max_energy_j']:.4g}", "", ""]

    rows = [
        planned("planned, predicted", p),
        planned(f"planned, {measured}", m),
        at_max("maximum clock, predicted", p),
        at_max(f"maximum clock, {measured}", m),
    ]
    return lines + markdown_table(header, rows)


def estimate_pipeline_s(gpu: Device, sizes: Sizes, setup_s: float) -> float:
    """About how long `pipeline_measured` takes: the profile's windows, then two runs of two stages."""
    profile = 2 * 2 * sizes.pipeline_clocks * sizes.profile_window_s(gpu) * PROFILE_WINDOW_SPREAD
    return setup_s + profile + 2 * 2 * (sizes.window_s(gpu) + 0.5)


@dataclasses.dataclass
class _Stage:
    """One pipeline stage on the GPU under test: its forward and backward of one microbatch.

    `backward(mb, keep=True)` keeps the microbatch's graph, so that the profiler can repeat a backward
    without a forward inside its window.
    """

    forward: Callable[[int], None]
    backward: Callable[[int, bool], None]
    outputs: dict[int, Any]


def stages_of(rig: Rig) -> list[_Stage]:
    """The rig model's stages: transformer layers on CUDA (bf16), or a tiny copy on the CPU for the simulated GPU.

    Each forward keeps its output per microbatch until that microbatch's backward, as a pipeline stage does;
    the first stage's backward takes a gradient of its output's shape (what the next stage would send).
    """
    import torch

    from wattwise.tools.workload import emulate_step

    m, gpu = rig.model, rig.gpu
    device = torch.device("cuda", rig.cuda_index) if rig.cuda_index is not None else torch.device("cpu")
    dtype = torch.bfloat16 if rig.cuda_index is not None else torch.float32
    torch.manual_seed(0)
    stages = []
    for index, layers in enumerate(m.stage_layers):
        body = torch.nn.Sequential(
            *[
                torch.nn.TransformerEncoderLayer(m.stage_width, m.stage_heads, 4 * m.stage_width, batch_first=True)
                for _ in range(layers)
            ]
        ).to(device, dtype)
        x = torch.randn(m.stage_batch, m.stage_seq, m.stage_width, device=device, dtype=dtype)
        grad = torch.randn_like(x)
        outputs: dict[int, Any] = {}
        last = index == len(m.stage_layers) - 1
        forward_s = m.emulated_forward_s[index] or None
        backward_s = 2 * m.emulated_forward_s[index] or None

        def forward(mb: int, body: Any = body, x: Any = x, outputs: dict[int, Any] = outputs) -> None:
            outputs[mb] = body(x.detach().requires_grad_(True))

        def backward(
            mb: int, keep: bool, outputs: dict[int, Any] = outputs, grad: Any = grad, last: bool = last
        ) -> None:
            out = outputs[mb] if keep else outputs.pop(mb)
            if last:
                out.float().pow(2).mean().backward(retain_graph=keep)
            else:
                out.backward(grad, retain_graph=keep)

        def run_forward(mb: int, forward: Callable[[int], None] = forward, base_s: float | None = forward_s) -> None:
            emulate_step([gpu], lambda: forward(mb), base_time_s=base_s)

        def run_backward(
            mb: int, keep: bool, backward: Callable[[int, bool], None] = backward, base_s: float | None = backward_s
        ) -> None:
            emulate_step([gpu], lambda: backward(mb, keep), base_time_s=base_s)

        stages.append(_Stage(run_forward, run_backward, outputs))
    return stages


def _profile_stage_work(rig: Rig, stage: _Stage) -> StageWork:
    """The stage as `PipelineProfiler` runs it: one microbatch's forward, or its backward (graph kept).

    The profiler's warm-up backward makes the forward it needs, outside the measured window.
    """
    from wattwise.frequency.profiler import StageWork

    def forward() -> None:
        stage.forward(0)

    def backward() -> None:
        if 0 not in stage.outputs:
            stage.forward(0)
        stage.backward(0, True)

    return StageWork(rig.gpu, forward, backward)


@dataclasses.dataclass(frozen=True)
class PipelineFiles:
    """Where a pipeline check writes the measured profile (CSV), the frontier and the plan (JSON)."""

    profile_csv: Path
    frontier: Path
    plan: Path

    @classmethod
    def in_folder(cls, folder: Path, profile_name: str = "profile.csv") -> PipelineFiles:
        """The three files in `folder`, the profile named `profile_name`."""
        return cls(folder / profile_name, folder / "frontier.json", folder / "plan.json")


def profile_and_plan(
    rig: Rig,
    stages: Sequence[_Stage],
    guard: SettingsGuard,
    files: PipelineFiles,
    *,
    clocks_mhz: Sequence[int],
    iterations: int,
    warmup: int,
    unit_time_s: float,
    p_blocking_w: Callable[[], float],
    microbatches: int = PIPELINE_MICROBATCHES,
) -> float:
    """Profile `stages` at each clock through `guard`, then `wattwise frontier` and `wattwise plan` on the profile.

    `p_blocking_w` reads the GPU's power while it waits, once the profile is measured (its clocks reset);
    returns what it read, the frontier's blocking power.

    Raises:
        Skip: the driver refused to lock the SM clocks (its words).
        Failure: `wattwise frontier` or `wattwise plan` failed on the measured profile.
    """
    from wattwise.cli.main import main as wattwise_main
    from wattwise.frequency.profiler import PipelineProfiler
    from wattwise.pipeline.profiles import write_profile
    from wattwise.tools.checks import Failure, Skip

    try:
        profile = PipelineProfiler(
            [_profile_stage_work(rig, s) for s in stages],
            guard,
            frequencies_mhz=list(clocks_mhz),
            iterations=iterations,
            warmup=warmup,
            sync=rig.sync,
        ).measure()
    except NoPermissionError as err:
        raise Skip(f"locking SM clocks was refused; the driver said: {err}") from None
    write_profile(profile, files.profile_csv)
    blocking_w = p_blocking_w()
    code = wattwise_main(
        [
            "frontier",
            str(files.profile_csv),
            "--microbatches",
            str(microbatches),
            "--schedule",
            PIPELINE_SCHEDULE,
            "--unit-time",
            str(unit_time_s),
            "--p-blocking",
            str(blocking_w),
            "--out",
            str(files.frontier),
            "--quiet",
        ]
    )
    if code:
        raise Failure(f"wattwise frontier exited {code} on the measured profile")
    code = wattwise_main(["plan", str(files.frontier), "--out", str(files.plan)])
    if code:
        raise Failure(f"wattwise plan exited {code} on the frontier")
    return blocking_w


def compose_iteration(
    instruction_s: dict[InstructionKey, float],
    stage_energy_j: Sequence[float],
    *,
    schedule: str,
    stages: int,
    microbatches: int,
    p_blocking_w: float,
) -> tuple[float, float]:
    """(iteration time, iteration energy) composed from stages run one after the other on one GPU.

    The time is the longest path of the schedule's DAG over the measured instruction times; the energy is
    what the stages burned in their instructions plus the blocking power over the time a stage waits,
    exactly as the planner counts it (`wattwise.pipeline.problem.iteration_energy_j`).
    """
    import numpy as np

    from wattwise.pipeline.dag import pipeline_dag
    from wattwise.pipeline.problem import iteration_energy_j

    dag = pipeline_dag(schedule, stages, microbatches)
    durations = np.zeros(dag.num_nodes)
    for (stage, instruction, mb), seconds in instruction_s.items():
        durations[dag.node(stage, instruction, mb)] = seconds  # type: ignore[arg-type]
    time_s = float(dag.makespan(durations))
    busy_s = float(durations.sum())
    return time_s, float(iteration_energy_j(float(sum(stage_energy_j)), busy_s, time_s, stages, p_blocking_w))


def _run_plan(
    rig: Rig,
    guard: SettingsGuard,
    stages: list[_Stage],
    plan: list[list[Any]],
    window_s: float,
    clock_change_s: Sequence[float] = (),
    timer: Callable[[float, Callable[[], None]], None] | None = None,
) -> tuple[dict[InstructionKey, float], list[float], list[list[tuple[str, int, int]]]]:
    """Run each stage's instruction sequence under its plan (the controller locks the clocks), for a window.

    The controller changes each stage's clock off the training thread, `clock_change_s[stage]` ahead of
    a faster segment (the plan's latencies, from the profile), as `follow_plan` does in training; on the
    simulated GPU's virtual clock, through its `timer` (`VirtualClock.call_later`) at the same moments.

    Returns each instruction's mean time, each stage's mean energy per iteration, and what each controller
    applied in its first iteration.
    """
    from wattwise.frequency.controller import FrequencyController, stage_plan
    from wattwise.monitor import EnergyMonitor

    gpu = rig.gpu
    clock = rig.clock(time.perf_counter)
    times: dict[InstructionKey, list[float]] = {}
    energies: list[float] = []
    applied: list[list[tuple[str, int, int]]] = []
    for index, stage in enumerate(stages):
        steps = stage_plan(plan[index])
        latency_s = clock_change_s[index] if index < len(clock_change_s) else 0.0
        # On a real GPU the clock calls run off the training thread; the simulated one's virtual time
        # passes only on the thread that runs its work, so they run there.
        controller = FrequencyController(
            steps,
            gpu,
            guard,
            strict=True,
            clock_change_s=latency_s,
            background=gpu.simulation is None,
            timer=timer,
        )
        monitor = EnergyMonitor([gpu], sync=rig.sync)
        try:
            _stage_iteration(rig, stage, controller, steps, clock, {})  # warm-up, clocks settle
            monitor.begin_window("stage")
            iterations, start = 0, clock()
            while iterations < 2 or clock() - start < window_s:
                _stage_iteration(rig, stage, controller, steps, clock, times, index)
                iterations += 1
            window = monitor.end_window("stage")
        finally:
            controller.stop()
            monitor.close()
        energies.append(window.total_energy_j / iterations)
        applied.append(controller.applied[: len(steps)])
    return {k: sum(v) / len(v) for k, v in times.items()}, energies, applied


def _stage_iteration(
    rig: Rig,
    stage: _Stage,
    controller: FrequencyController,
    steps: Sequence[Step],
    clock: Callable[[], float],
    times: dict[InstructionKey, list[float]],
    index: int = 0,
) -> None:
    for step in steps:
        controller.before(step.instruction, step.microbatch)
        start = clock()
        if step.instruction == FORWARD:
            stage.forward(step.microbatch)
        else:
            stage.backward(step.microbatch, False)
        rig.sync()
        times.setdefault((index, step.instruction, step.microbatch), []).append(clock() - start)


class VirtualClock:
    """Simulated seconds: what `sleep` waits is added at once; the simulated GPU's pipeline check runs on it.

    The check measures instructions of 20-60 ms; on a wall clock, a CPU shared with other work stretches
    the tiny model's real work beyond its modelled time and the figures follow the machine's load, not
    the plan. On this clock each instruction lasts exactly what the simulated GPU's physics says.
    """

    def __init__(self) -> None:
        self.now_s = 0.0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._count = 0

    def __call__(self) -> float:
        """The simulated seconds passed."""
        return self.now_s

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass, running each timer that falls due on the way at its moment."""
        until = self.now_s + max(0.0, seconds)
        while self._timers and self._timers[0][0] <= until:
            at_s, _, run = heapq.heappop(self._timers)
            self.now_s = max(self.now_s, at_s)
            run()  # may sleep itself (a clock call takes its time), as a call on another thread would
        self.now_s = max(self.now_s, until)

    def call_later(self, seconds: float, run: Callable[[], None]) -> None:
        """Run `run` when `seconds` more have passed (during a later `sleep`)."""
        self._count += 1
        heapq.heappush(self._timers, (self.now_s + max(0.0, seconds), self._count, run))


def _idle_power_w(rig: Rig) -> float:
    """The GPU's power while it waits (the blocking power of the frontier), read after a second idle."""
    rig.sync()
    sleep = rig.gpu.simulation.sleep if rig.gpu.simulation is not None else time.sleep
    sleep(1.0)
    return round(rig.gpu.power_w(), 1)


def check_pipeline_measured(ctx: Context) -> PipelineFigures:
    """Lever 3: profile two stages, plan the no-slowdown point, run it under the controller; measured vs predicted.

    Raises:
        Skip: no GPU or torch, fewer than two known SM clocks, or the driver refused to lock them.
        Failure: `wattwise frontier` or `plan` failed, or the controller did not follow the plan.
    """
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import Failure, Skip

    rig = Rig.of(ctx, trainer=False)
    timer = None
    if rig.gpu.simulation is not None:  # the simulated GPU's time, not the CPU's (`VirtualClock`)
        virtual = VirtualClock()
        rig = dataclasses.replace(rig, gpu=rig.gpu.simulation.on_clock(virtual, virtual.sleep))
        timer = virtual.call_later
    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    try:
        clocks = pipeline_clocks_mhz(gpu.supported_sm_clocks_mhz(), sizes.pipeline_clocks)
    except DeviceError as err:
        raise Skip(f"supported SM clocks unknown; the driver said: {err}") from None
    if len(clocks) < 2:
        raise Skip(f"fewer than two supported SM clocks ({clocks})")
    folder = ctx.out / "levers" / "pipeline"
    folder.mkdir(parents=True, exist_ok=True)
    files = PipelineFiles.in_folder(folder)
    stages = stages_of(rig)
    window_s, profile_window_s = sizes.window_s(gpu), sizes.profile_window_s(gpu)
    microbatches = PIPELINE_MICROBATCHES
    with SettingsGuard() as guard:
        guard.install_signal_handlers()
        instruction_s = _instruction_time_s(rig, stages)
        unit_s = max(1e-5, float(f"{instruction_s / 50:.1g}"))
        p_blocking_w = profile_and_plan(
            rig,
            stages,
            guard,
            files,
            clocks_mhz=clocks,
            iterations=max(3, math.ceil(profile_window_s / instruction_s)),
            warmup=1,
            unit_time_s=unit_s,
            p_blocking_w=lambda: _idle_power_w(rig),
            microbatches=microbatches,
        )
        plan: PlanJson = json.loads(files.plan.read_text())
        # Each run spans at least PIPELINE_RUN_ITERATIONS iterations, so that the instructions' noise
        # averages out of the composed iteration (a fine counter's windows alone hold only a few).
        run_s = max(window_s, PIPELINE_RUN_ITERATIONS * float(plan["max_frequency_time_s"]))
        top = max(clocks)
        at_max = [[[ins, mb, top] for ins, mb, _ in stage] for stage in plan["plan"]]
        measured = {}
        for name, steps in (("plan", plan["plan"]), ("max", at_max)):
            times, energies, applied = _run_plan(
                rig, guard, stages, steps, run_s, plan.get("clock_change_s", []) if name == "plan" else (), timer
            )
            if name == "plan" and [[list(a) for a in stage] for stage in applied] != [
                [list(s) for s in stage] for stage in steps
            ]:
                raise Failure("the frequency controller did not apply the plan's clocks in the plan's order")
            measured[name] = compose_iteration(
                times,
                energies,
                schedule=PIPELINE_SCHEDULE,
                stages=len(stages),
                microbatches=microbatches,
                p_blocking_w=p_blocking_w,
            )
    (plan_t, plan_e), (max_t, max_e) = measured["plan"], measured["max"]
    plot = _plot_measured(folder, files.profile_csv, files.frontier, p_blocking_w, microbatches, measured)
    figures: PipelineFigures = {
        "gpu": gpu.name,
        "simulated": gpu.simulated,
        "stages": len(stages),
        "microbatches": microbatches,
        "schedule": PIPELINE_SCHEDULE,
        "clocks_mhz": clocks,
        "p_blocking_w": p_blocking_w,
        "unit_time_s": unit_s,
        "window_s": window_s,
        "run_s": run_s,
        "profile_csv": str(files.profile_csv),
        "frontier": str(files.frontier),
        "plan": str(files.plan),
        "composition": (
            "On one GPU the two stages ran one after the other; the iteration is composed from the measured "
            f"instruction times by the {PIPELINE_SCHEDULE} schedule's DAG (its longest path), and its energy is "
            "the stages' measured energy plus the blocking power over the time a stage waits."
        ),
        "predicted": {
            "plan_time_s": plan["time_s"],
            "plan_energy_j": plan["energy_j"],
            "max_time_s": plan["max_frequency_time_s"],
            "max_energy_j": plan["max_frequency_energy_j"],
            "saving": plan["saving"],
            "slowdown": plan["slowdown"],
        },
        "measured": {
            "plan_time_s": plan_t,
            "plan_energy_j": plan_e,
            "max_time_s": max_t,
            "max_energy_j": max_e,
            "saving": 1.0 - plan_e / max_e if max_e > 0 else None,
            "slowdown": plan_t / max_t - 1.0 if max_t > 0 else None,
        },
        "claim": PERSEUS_CLAIM,
        "plot": plot,
    }
    return figures


def _plot_measured(
    folder: Path,
    profile_csv: Path,
    frontier_json: Path,
    p_blocking_w: float,
    microbatches: int,
    measured: dict[str, tuple[float, float]],
) -> str | None:
    """`frontier.png`: the frontier with the planned points and the measured ones; None without matplotlib."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # the figures stand without the picture
        return None
    from wattwise.pipeline.dag import pipeline_dag
    from wattwise.pipeline.files import read_frontier_json
    from wattwise.pipeline.plot import plot_frontier
    from wattwise.pipeline.problem import PlanningProblem
    from wattwise.pipeline.profiles import load_profile

    profile = load_profile(profile_csv)
    problem = PlanningProblem.build(
        profile, pipeline_dag(PIPELINE_SCHEDULE, profile.num_stages, microbatches), p_blocking_w
    )
    path = folder / "frontier.png"
    points = [("no-slowdown plan, measured", *measured["plan"]), ("maximum clock, measured", *measured["max"])]
    plot_frontier(problem, read_frontier_json(frontier_json), path, measured=points)
    return str(path)


def _instruction_time_s(rig: Rig, stages: list[_Stage]) -> float:
    """The shortest instruction's time at the default clock (one forward and backward per stage, after one warm-up)."""
    shortest = math.inf
    clock = rig.clock(time.perf_counter)
    for stage in stages:
        for _ in range(2):
            rig.sync()
            start = clock()
            stage.forward(0)
            rig.sync()
            middle = clock()
            stage.backward(0, False)
            rig.sync()
            end = clock()
        shortest = min(shortest, middle - start, end - middle)
    return max(shortest, 1e-4)
