"""Benchmark the pipeline frontier on the real Perseus profiles (8 stages; GPT-3 175B / A100, Bloom / A40).

    python benchmarks/frontier.py [--data ../shared/data] [--models gpt3,bloom] [--microbatches 12,24,48,96]
                                  [--lowtime gpt3:12,bloom:12] [--lowtime-timeout S] [--out DIR] [--plot]

Each case runs the whole `wattwise frontier` command in its own process (imports, profile, relaxation,
rounding, the JSON) and reports its wall time, CPU seconds (user + system) and peak memory (max RSS),
with the targets beside them (wattwise's bytecode compiled first, as `pip install` leaves it); how many
deadlines of the grid it rounded; how many non-dominated points the frontier has; the saving at no
slowdown against all-maximum frequency and the saving with a straggler at T' = 1.2 x the
all-maximum-frequency time; and our frontier beside the reference frontier
file (the authors' fitted-model energies, with time quantised downwards: a reference, not ground truth).
Every energy of ours is a real plan's, computed from the profile.

With lowtime importable (`pip install lowtime`, optional; or on PYTHONPATH), the authors'
Phillips-Dessouky solver runs on the same profile, schedule and machine, set up as its Perseus example
does, in its own process too, right after ours: its plans (one per step) are evaluated with the same
real figures as ours, and the table shows it beside ours with the speed-up. Results go to stdout
(markdown tables) and DIR/results.json (DIR defaults to <tmp>/wattwise-benchmark-frontier).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.plan import TIME_TOLERANCE
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import load_profile

#: name -> (profile file, reference frontier prefix, unit time s, blocking power W), from the data README.
MODELS = {
    "gpt3": ("gpt3-175b+a100_sxm_bf16", 0.001, 83.64),
    "bloom": ("bloom+a40_bf16", 0.0001, 70.38),
}
STAGES = 8
STRAGGLER_FACTOR = 1.2
#: Targets of the whole `wattwise frontier` process (issue 16): wall time at 8 x 96 and at GPT-3 8 x 12,
#: peak memory, and the speed-up over lowtime wherever lowtime finishes.
TARGET_WALL_S_AT_96 = 10.0
TARGET_WALL_S_GPT3_12 = 0.8
TARGET_PEAK_MB = 400.0
TARGET_SPEEDUP = 10.0


@dataclass
class Row:
    solver: str
    model: str
    microbatches: int
    wall_s: float
    cpu_s: float
    peak_mb: float
    #: Deadlines of the grid rounded and in the grid (ours); plans yielded (lowtime: one per step).
    rounded: int
    deadlines: int
    #: Points no other is both faster-or-equal and cheaper-or-equal than in sum(e - P_b * t).
    non_dominated: int
    max_frequency_time_s: float
    max_frequency_energy_j: float
    intrinsic_time_s: float
    intrinsic_energy_j: float
    intrinsic_saving: float
    intrinsic_slowdown: float
    straggler_time_s: float
    straggler_saving: float
    #: lowtime only: seconds spent in its Phillips-Dessouky loop (the rest fits its cost models).
    solve_s: float = float("nan")
    fastest_time_s: float = float("nan")
    fastest_energy_j: float = float("nan")
    least_energy_j: float = float("nan")
    reference_points: int = 0
    reference_fastest_time_s: float = float("nan")
    reference_fastest_energy_j: float = float("nan")
    reference_least_energy_j: float = float("nan")


def savings(problem: PlanningProblem, times: np.ndarray, energies: np.ndarray) -> dict[str, float]:
    """Intrinsic choice (least energy no slower than all-maximum frequency) and straggler saving."""
    max_time, max_energy = (float(x) for x in problem.evaluate(problem.max_frequency_choice()))
    ok = times <= max_time * (1 + TIME_TOLERANCE)
    if ok.any():
        k = int(np.flatnonzero(ok)[np.argmin(energies[ok])])
        intrinsic_time, intrinsic_energy = float(times[k]), float(energies[k])
    else:  # the solver found nothing as fast: the maximum frequency itself
        intrinsic_time, intrinsic_energy = max_time, max_energy
    blocking_w = problem.p_blocking_w * problem.dag.num_stages
    straggler_s = STRAGGLER_FACTOR * max_time
    late = times <= straggler_s
    at_straggler = energies[late] + blocking_w * (straggler_s - times[late])
    baseline = max_energy + blocking_w * (straggler_s - max_time)
    return {
        "max_frequency_time_s": max_time,
        "max_frequency_energy_j": max_energy,
        "intrinsic_time_s": intrinsic_time,
        "intrinsic_energy_j": intrinsic_energy,
        "intrinsic_saving": 1 - intrinsic_energy / max_energy,
        "intrinsic_slowdown": intrinsic_time / max_time - 1,
        "straggler_time_s": straggler_s,
        "straggler_saving": 1 - float(at_straggler.min()) / baseline if late.any() else 0.0,
    }


def read_reference(path: Path) -> np.ndarray:
    with open(path) as fh:
        rows = [(float(r["time"]), float(r["energy"])) for r in csv.DictReader(fh)]
    return np.asarray(sorted(rows))


def non_dominated(problem: PlanningProblem, times: np.ndarray, energies: np.ndarray) -> int:
    """How many of the points no other beats on time and on sum(e - P_b * t) (`assemble_frontier`'s sense)."""
    compute = energies - problem.p_blocking_w * problem.dag.num_stages * times
    kept, lowest = 0, np.inf
    for k in np.lexsort((compute, times)):
        if compute[k] < lowest:
            kept, lowest = kept + 1, compute[k]
    return kept


def measured(command: list[str], timeout_s: float = math.inf) -> tuple[int, str, str, float, float, float]:
    """Run `command` in its own process: exit code, stdout, stderr, wall time, CPU seconds, peak memory (MB).

    The wait blocks until the process ends (no polling interval inflates the wall time); a process still
    running after `timeout_s` is killed (exit code -9).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        killer = threading.Timer(timeout_s, process.kill) if math.isfinite(timeout_s) else None
        if killer is not None:
            killer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            if killer is not None:
                killer.cancel()
        wall_s = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (
            process.returncode,
            out.read(),
            err.read(),
            wall_s,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
        )


def compile_bytecode() -> None:
    """Byte-compile wattwise as `pip install` leaves it, so that no timed process compiles its modules.

    With PYTHONDONTWRITEBYTECODE set (as on the machines the README's figures come from) an editable install
    never writes its bytecode, and every `wattwise` process would spend about 0.05 s compiling it first.
    """
    import compileall

    import wattwise

    compileall.compile_dir(Path(wattwise.__file__).parent, quiet=1)


def run_ours(
    profile_path: Path,
    problem: PlanningProblem,
    model: str,
    microbatches: int,
    unit_s: float,
    reference: np.ndarray | None,
    out: Path,
) -> tuple[Row, np.ndarray]:
    """The whole `wattwise frontier` command for one case, in its own process."""
    frontier_path = out / f"{model}_mb{microbatches}.json"
    wattwise = Path(sys.executable).with_name("wattwise")
    command = [
        str(wattwise),
        "frontier",
        str(profile_path),
        "--microbatches",
        str(microbatches),
        "--unit-time",
        str(unit_s),
        "--p-blocking",
        str(problem.p_blocking_w),
        "--out",
        str(frontier_path),
    ]
    code, _, stderr, wall_s, cpu_s, peak_mb = measured(command)
    if code != 0:
        raise RuntimeError(f"wattwise frontier failed ({code}): {stderr.strip()}")
    # Its last progress line: "wattwise frontier: R/G deadlines solved in X s".
    rounded, deadlines = (int(x) for x in stderr.strip().splitlines()[-1].split()[2].split("/"))
    data = json.loads(frontier_path.read_text())
    points = np.asarray([(p["time_s"], p["energy_j"]) for p in data["points"]])
    times, energies = points[:, 0], points[:, 1]
    row = Row(
        "wattwise",
        model,
        microbatches,
        wall_s,
        cpu_s,
        peak_mb,
        rounded,
        deadlines,
        non_dominated(problem, times, energies),
        **savings(problem, times, energies),
    )
    # The fastest plan: the least energy among the points as fast as the first within the time tolerance (the
    # maximum-frequency plan and a polished plan of the same time can differ in the last bits of their sums).
    fastest = np.flatnonzero(times <= times[0] * (1 + TIME_TOLERANCE))
    best = fastest[np.argmin(energies[fastest])]
    row.fastest_time_s, row.fastest_energy_j = float(times[best]), float(energies[best])
    row.least_energy_j = float(energies.min())
    if reference is not None and len(reference):
        row.reference_points = len(reference)
        row.reference_fastest_time_s, row.reference_fastest_energy_j = (float(x) for x in reference[0])
        row.reference_least_energy_j = float(reference[:, 1].min())
    return row, points


def run_lowtime(
    data: Path, problem: PlanningProblem, model: str, microbatches: int, out: Path, timeout_s: float
) -> tuple[Row, np.ndarray] | str:
    """lowtime on one case, in its own process (this script with --lowtime-child); why not, if it did not run."""
    result_path = out / f"lowtime_{model}_mb{microbatches}.json"
    command = [
        sys.executable,
        __file__,
        "--data",
        str(data),
        "--lowtime-child",
        f"{model}:{microbatches}",
        "--out",
        str(result_path),
    ]
    code, _, stderr, wall_s, cpu_s, peak_mb = measured(command, timeout_s)
    if code == _NO_LOWTIME:
        return "not importable (pip install lowtime)"
    if code == -9:
        return f"did not finish in {timeout_s:g} s ({cpu_s:.0f} CPU s, {peak_mb:.0f} MB), killed"
    if code != 0:
        raise RuntimeError(f"lowtime failed ({code}): {stderr.strip()}")
    result = json.loads(result_path.read_text())
    times, energies = np.asarray(result["times"]), np.asarray(result["energies"])
    row = Row(
        "lowtime 0.3.0",
        model,
        microbatches,
        wall_s,
        cpu_s,
        peak_mb,
        len(times),
        len(times),
        non_dominated(problem, times, energies),
        **savings(problem, times, energies),
    )
    # Its own headline: the fastest plan (last step), whatever its slowdown.
    row.intrinsic_time_s, row.intrinsic_energy_j = float(times[-1]), float(energies[-1])
    row.intrinsic_saving = 1 - row.intrinsic_energy_j / row.max_frequency_energy_j
    row.intrinsic_slowdown = row.intrinsic_time_s / row.max_frequency_time_s - 1
    row.solve_s = result["solve_s"]
    row.fastest_time_s, row.fastest_energy_j = row.intrinsic_time_s, row.intrinsic_energy_j
    row.least_energy_j = float(energies.min())
    return row, np.stack([times, energies], axis=1)


#: Exit code of the lowtime child when lowtime is not importable.
_NO_LOWTIME = 3


def lowtime_plans(problem: PlanningProblem, unit_s: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The authors' solver (lowtime 0.3.0) as its Perseus example sets it up: its plans' real times and
    energies, and the seconds of its Phillips-Dessouky loop; None if lowtime is not importable."""
    try:
        import networkx as nx
        from lowtime.cost_model import ExponentialModel
        from lowtime.graph_utils import add_sink_node, add_source_node
        from lowtime.operation import CandidateExecutionOptions, ExecutionOption, OperationSpec
        from lowtime.perseus.instruction import Backward, Forward
        from lowtime.solver import PhillipsDessouky
    except ImportError:
        return None
    profile = problem.profile
    dag = problem.dag
    specs = {}
    for stage in range(dag.num_stages):
        for instruction in ("forward", "backward"):
            options = [
                ExecutionOption[int](real_time=m.time_s, unit_time=unit_s, cost=m.energy_j, knob=m.frequency_mhz)
                for m in profile.options(stage, instruction)
            ]
            candidates = CandidateExecutionOptions[int](options=options)
            for option in candidates.options:  # effective energy, as in the Perseus example
                option.cost -= problem.p_blocking_w * option.quant_time * option.unit_time
            model_fit = ExponentialModel(candidates)
            specs[(stage, instruction)] = OperationSpec[int](options=candidates, cost_model=model_fit)
    graph = nx.DiGraph()
    ops = []
    for node in range(dag.num_nodes):
        stage, microbatch = int(dag.stage_of[node]), int(dag.microbatch_of[node])
        kind = Forward if dag.instruction_of[node] == 0 else Backward
        op = kind(
            spec=specs[(stage, "forward" if kind is Forward else "backward")], stage_id=stage, micro_batch_id=microbatch
        )
        ops.append(op)
        graph.add_node(node + 2, op=op)
    graph.add_edges_from((int(t) + 2, int(h) + 2) for t, h in zip(dag.edge_tails, dag.edge_heads, strict=True))
    add_source_node(graph, 0)
    add_sink_node(graph, 1)
    graph.graph["source_node"], graph.graph["sink_node"] = 0, 1
    frequencies = []
    solve_started = time.perf_counter()
    for _ in PhillipsDessouky(graph).run():
        frequencies.append([op.assigned_knob for op in ops])
    solve_s = time.perf_counter() - solve_started
    choices = np.stack([problem.choice_for_frequencies(np.asarray(f)) for f in frequencies])
    times, energies = problem.evaluate(choices)
    return np.asarray(times), np.asarray(energies), solve_s


def plot(
    path: Path, title: str, ours: np.ndarray, reference: np.ndarray | None, lowtime_curve: np.ndarray | None
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    ax.plot(ours[:, 0], ours[:, 1], lw=1, label="wattwise (real plans)")
    if reference is not None:
        ax.plot(reference[:, 0], reference[:, 1], lw=1, label="reference file (fitted model)")
    if lowtime_curve is not None:
        ax.plot(lowtime_curve[:, 0], lowtime_curve[:, 1], lw=1, label="lowtime 0.3.0 plans (real)")
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("energy per iteration (J)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lowtime_child(data: Path, case: str, out: Path) -> int:
    """The body of the lowtime process: solve one case, write the real figures of its plans."""
    model, microbatches = case.split(":")
    name, unit_s, p_blocking_w = MODELS[model]
    profile = load_profile(data / "perseus" / "stage_profile" / f"{name}.csv")
    problem = PlanningProblem.build(profile, pipeline_dag("1f1b", STAGES, int(microbatches)), p_blocking_w)
    result = lowtime_plans(problem, unit_s)
    if result is None:
        return _NO_LOWTIME
    times, energies, solve_s = result
    out.write_text(json.dumps({"times": times.tolist(), "energies": energies.tolist(), "solve_s": solve_s}))
    return 0


def with_clock_change(path: Path, latency_s: float, out: Path) -> Path:
    """A copy of the profile at `path` in `out` whose every row gives the stage a clock-change latency."""
    copy = out / f"{path.stem}+clock_change_{latency_s * 1000:g}ms.csv"
    with path.open(newline="") as src, copy.open("w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, [*(reader.fieldnames or []), "clock_change_s"])
        writer.writeheader()
        for row in reader:
            writer.writerow({**row, "clock_change_s": repr(latency_s)})
    return copy


def targets(row: Row) -> tuple[str, str]:
    """The wall-time and peak-memory targets of a case of ours, with a tick or a cross."""
    wall = ""
    if row.microbatches == 96:
        wall = f"< {TARGET_WALL_S_AT_96:g} {'yes' if row.wall_s < TARGET_WALL_S_AT_96 else 'NO'}"
    elif row.model == "gpt3" and row.microbatches == 12:
        wall = f"< {TARGET_WALL_S_GPT3_12:g} {'yes' if row.wall_s < TARGET_WALL_S_GPT3_12 else 'NO'}"
    return wall, f"< {TARGET_PEAK_MB:g} {'yes' if row.peak_mb < TARGET_PEAK_MB else 'NO'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--models", default="gpt3,bloom")
    parser.add_argument("--microbatches", default="12,24,48,96")
    parser.add_argument(
        "--lowtime",
        default="gpt3:12,bloom:12",
        help="model:M pairs to also run lowtime on (if importable); empty for none",
    )
    parser.add_argument(
        "--lowtime-timeout",
        type=float,
        default=900.0,
        metavar="S",
        help="stop lowtime after S seconds of one case (default 900)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "wattwise-benchmark-frontier",
        help="where results.json, the frontiers and the plots go",
    )
    parser.add_argument("--plot", action="store_true", help="write one PNG per run into --out")
    parser.add_argument(
        "--clock-change-s",
        type=float,
        default=0.0,
        metavar="S",
        help="give every stage this clock-change latency (the profile's clock_change_s column): plans the GPU "
        "can follow, their switches counted (default 0: the profile as measured, no latency)",
    )
    parser.add_argument("--lowtime-child", metavar="MODEL:M", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lowtime_child:
        return lowtime_child(args.data, args.lowtime_child, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    compile_bytecode()
    lowtime_runs = {tuple(item.split(":")) for item in args.lowtime.split(",") if item}
    rows: list[Row] = []
    pairs: list[tuple[Row, Row | None]] = []
    for model in args.models.split(","):
        name, unit_s, p_blocking_w = MODELS[model]
        profile_path = args.data / "perseus" / "stage_profile" / f"{name}.csv"
        if args.clock_change_s > 0:
            profile_path = with_clock_change(profile_path, args.clock_change_s, args.out)
            model = f"{model}+{args.clock_change_s * 1000:g}ms"
        profile = load_profile(profile_path)
        for microbatches in (int(m) for m in args.microbatches.split(",")):
            problem = PlanningProblem.build(profile, pipeline_dag("1f1b", STAGES, microbatches), p_blocking_w)
            ref_path = args.data / "perseus" / "frontier" / f"{name}_mb{microbatches}.csv"
            reference = read_reference(ref_path) if ref_path.exists() else None
            row, ours = run_ours(profile_path, problem, model, microbatches, unit_s, reference, args.out)
            rows.append(row)
            print(
                f"{model} x{microbatches}: {row.wall_s:.2f} s, {row.cpu_s:.2f} CPU s, {row.peak_mb:.0f} MB, "
                f"{row.non_dominated} points",
                flush=True,
            )
            low = None
            if (model, str(microbatches)) in lowtime_runs:
                result = run_lowtime(args.data, problem, model, microbatches, args.out, args.lowtime_timeout)
                if isinstance(result, str):
                    print(f"  lowtime: {result}", flush=True)
                else:
                    low = result
            if low is not None:
                rows.append(low[0])
                print(f"  lowtime: {low[0].wall_s:.2f} s, {low[0].cpu_s:.2f} CPU s, {low[0].rounded} steps", flush=True)
            pairs.append((row, low[0] if low is not None else None))
            if args.plot:
                plot(
                    args.out / f"{model}_mb{microbatches}.png",
                    f"{name}, 8 x {microbatches}",
                    ours,
                    reference,
                    low[1] if low is not None else None,
                )
    (args.out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print()
    print(
        "| solver | model | M | wall s (target) | CPU s | peak MB (target) | deadlines rounded | "
        "non-dominated points | no-slowdown saving (slowdown) | straggler 1.2x saving |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        wall_target, peak_target = targets(r) if r.solver == "wattwise" else ("", "")
        wall = f"{r.wall_s:.2f}" + (f" ({wall_target})" if wall_target else "")
        wall += f" ({r.solve_s:.2f} solving)" if r.solve_s == r.solve_s else ""
        rounded = f"{r.rounded}/{r.deadlines}" if r.solver == "wattwise" else f"{r.rounded} steps"
        print(
            f"| {r.solver} | {r.model} | {r.microbatches} | {wall} | {r.cpu_s:.2f} | {r.peak_mb:.0f}"
            f"{f' ({peak_target})' if peak_target else ''} | {rounded} | {r.non_dominated} | "
            f"{r.intrinsic_saving:.2%} ({r.intrinsic_slowdown:+.2%}) | {r.straggler_saving:.2%} |"
        )
    compared = [(ours, low) for ours, low in pairs if low is not None]
    if compared:
        print()
        print(
            f"| model | M | speed-up over lowtime (wall; target >= {TARGET_SPEEDUP:g}x) | no-slowdown saving, "
            "ours vs lowtime's fastest plan | straggler 1.2x saving, ours vs lowtime |"
        )
        print("|---|---|---|---|---|")
        for ours, low in compared:
            speedup = low.wall_s / ours.wall_s
            print(
                f"| {ours.model} | {ours.microbatches} | {speedup:.1f}x "
                f"{'yes' if speedup >= TARGET_SPEEDUP else 'NO'} | {ours.intrinsic_saving:.2%} vs "
                f"{low.intrinsic_saving:.2%} {'yes' if ours.intrinsic_saving >= low.intrinsic_saving else 'NO'} | "
                f"{ours.straggler_saving:.2%} vs {low.straggler_saving:.2%} "
                f"{'yes' if ours.straggler_saving >= low.straggler_saving else 'NO'} |"
            )
    print()
    print(
        "| model | M | max frequency (s, J) | reference: points, fastest (s, J), least J | "
        "ours: fastest (s, J), least J |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        if r.solver == "wattwise":
            print(
                f"| {r.model} | {r.microbatches} | {r.max_frequency_time_s:.3f}, {r.max_frequency_energy_j:.0f} | "
                f"{r.reference_points}, {r.reference_fastest_time_s:.3f}, {r.reference_fastest_energy_j:.0f}, "
                f"{r.reference_least_energy_j:.0f} | {r.fastest_time_s:.3f}, {r.fastest_energy_j:.0f}, "
                f"{r.least_energy_j:.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
