"""Benchmark the pipeline frontier on the real Perseus profiles (8 stages; GPT-3 175B / A100, Bloom / A40).

    python benchmarks/frontier.py [--data ../shared/data] [--models gpt3,bloom] [--microbatches 12,24,48,96]
                                  [--lowtime gpt3:12,gpt3:24] [--out DIR] [--plot]

For each profile and microbatch count: the wall time of the full frontier (fast solver), its number of
points and of max-flow phases, the saving at no slowdown against all-maximum frequency, the saving with
a straggler at T' = 1.2 x the all-maximum-frequency time, and our frontier beside the reference
frontier file (the authors' fitted-model energies, with time quantised downwards: a reference, not
ground truth). Every energy of ours is a real plan's, computed from the profile.

With lowtime installed (`pip install lowtime`, optional), the authors' Phillips-Dessouky solver runs on
the same profile, schedule and machine, set up as its Perseus example does; its plans (one per step) are
evaluated with the same real figures as ours. Results go to stdout (markdown tables) and DIR/results.json
(DIR defaults to <tmp>/wattwise-benchmark-frontier).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.frontier import FrontierSolver
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


@dataclass
class Row:
    solver: str
    model: str
    microbatches: int
    wall_s: float
    points: int
    phases: int
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


def run_ours(problem: PlanningProblem, model: str, microbatches: int, unit_s: float,
             reference: np.ndarray | None) -> tuple[Row, np.ndarray]:
    solver = FrontierSolver(problem, unit_s)
    started = time.perf_counter()
    points = list(solver.run())
    wall_s = time.perf_counter() - started
    times = np.asarray([p.time_s for p in points])
    energies = np.asarray([p.energy_j for p in points])
    row = Row("wattwise", model, microbatches, wall_s, len(points), solver.phases,
              **savings(problem, times, energies))
    row.fastest_time_s, row.fastest_energy_j = float(times[0]), float(energies[0])
    row.least_energy_j = float(energies.min())
    if reference is not None and len(reference):
        row.reference_points = len(reference)
        row.reference_fastest_time_s, row.reference_fastest_energy_j = (float(x) for x in reference[0])
        row.reference_least_energy_j = float(reference[:, 1].min())
    return row, np.stack([times, energies], axis=1)


def run_lowtime(problem: PlanningProblem, model: str, microbatches: int,
                unit_s: float) -> tuple[Row, np.ndarray] | None:
    """The authors' solver (lowtime 0.3.0) as its Perseus example sets it up; None if not installed."""
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
    started = time.perf_counter()
    specs = {}
    for stage in range(dag.num_stages):
        for instruction in ("forward", "backward"):
            options = [ExecutionOption[int](real_time=m.time_s, unit_time=unit_s, cost=m.energy_j, knob=m.frequency_mhz)
                       for m in profile.options(stage, instruction)]
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
        op = kind(spec=specs[(stage, "forward" if kind is Forward else "backward")], stage_id=stage,
                  micro_batch_id=microbatch)
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
    wall_s = time.perf_counter() - started
    solve_s = time.perf_counter() - solve_started
    choices = np.stack([problem.choice_for_frequencies(np.asarray(f)) for f in frequencies])
    times, energies = problem.evaluate(choices)
    row = Row("lowtime 0.3.0", model, microbatches, wall_s, len(frequencies), 0, **savings(problem, times, energies))
    # Its own headline: the fastest plan (last step), whatever its slowdown.
    row.intrinsic_time_s, row.intrinsic_energy_j = float(times[-1]), float(energies[-1])
    row.intrinsic_saving = 1 - row.intrinsic_energy_j / row.max_frequency_energy_j
    row.intrinsic_slowdown = row.intrinsic_time_s / row.max_frequency_time_s - 1
    row.solve_s = solve_s
    row.fastest_time_s, row.fastest_energy_j = row.intrinsic_time_s, row.intrinsic_energy_j
    row.least_energy_j = float(energies.min())
    return row, np.stack([times, energies], axis=1)


def plot(path: Path, title: str, ours: np.ndarray, reference: np.ndarray | None,
         lowtime_curve: np.ndarray | None) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--models", default="gpt3,bloom")
    parser.add_argument("--microbatches", default="12,24,48,96")
    parser.add_argument("--lowtime", default="gpt3:12,gpt3:24",
                        help="model:M pairs to also run lowtime on (if installed); empty for none")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "wattwise-benchmark-frontier",
                        help="where results.json and the plots go")
    parser.add_argument("--plot", action="store_true", help="write one PNG per run into --out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lowtime_runs = {tuple(item.split(":")) for item in args.lowtime.split(",") if item}
    rows: list[Row] = []
    for model in args.models.split(","):
        name, unit_s, p_blocking_w = MODELS[model]
        profile = load_profile(args.data / "perseus" / "stage_profile" / f"{name}.csv")
        for microbatches in (int(m) for m in args.microbatches.split(",")):
            problem = PlanningProblem.build(profile, pipeline_dag("1f1b", STAGES, microbatches), p_blocking_w)
            ref_path = args.data / "perseus" / "frontier" / f"{name}_mb{microbatches}.csv"
            reference = read_reference(ref_path) if ref_path.exists() else None
            row, ours = run_ours(problem, model, microbatches, unit_s, reference)
            rows.append(row)
            print(f"{model} x{microbatches}: {row.wall_s:.2f} s, {row.points} points", flush=True)
            low = None
            if (model, str(microbatches)) in lowtime_runs:
                low = run_lowtime(problem, model, microbatches, unit_s)
            if low is not None:
                rows.append(low[0])
                print(f"  lowtime: {low[0].wall_s:.2f} s, {low[0].points} steps", flush=True)
            if args.plot:
                plot(args.out / f"{model}_mb{microbatches}.png", f"{name}, 8 x {microbatches}", ours, reference,
                     low[1] if low is not None else None)
    (args.out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print()
    print("| solver | model | M | wall time (s) | points | phases | no-slowdown saving (slowdown) "
          "| straggler 1.2x saving |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        wall = f"{r.wall_s:.2f}" + (f" ({r.solve_s:.2f} solving)" if r.solve_s == r.solve_s else "")
        print(f"| {r.solver} | {r.model} | {r.microbatches} | {wall} | {r.points} | {r.phases or '-'} | "
              f"{r.intrinsic_saving:.2%} ({r.intrinsic_slowdown:+.2%}) | {r.straggler_saving:.2%} |")
    print()
    print("| model | M | max frequency (s, J) | reference: points, fastest (s, J), least J | "
          "ours: fastest (s, J), least J |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r.solver == "wattwise":
            print(f"| {r.model} | {r.microbatches} | {r.max_frequency_time_s:.3f}, {r.max_frequency_energy_j:.0f} | "
                  f"{r.reference_points}, {r.reference_fastest_time_s:.3f}, {r.reference_fastest_energy_j:.0f}, "
                  f"{r.reference_least_energy_j:.0f} | {r.fastest_time_s:.3f}, {r.fastest_energy_j:.0f}, "
                  f"{r.least_energy_j:.0f} |")


if __name__ == "__main__":
    main()
