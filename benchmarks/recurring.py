"""Recurring-job benchmark: wattwise against the default and the oracle on Zeus's real GPU traces.

Runs all six workloads of `../shared/data/zeus-traces` on the V100 and A40 traces, for seeds 1-5, with
R = 2 x (batch sizes) x (power limits) recurrences, eta 0.5 and beta 2.0, and each job's usual target
metric, maximum epochs and default batch size. Prints, per GPU, the cumulative energy and cost (summed
over the seeds) of the default (default batch size at the highest power limit), wattwise, and the
oracle (least-cost fixed setting in hindsight), the cost ratios to the oracle, and the same ratio for
Zeus's published policy (pruning x2 + per-batch-size Gaussian Thompson sampling) re-implemented here and
run through the same simulator. All figures are simulated from measured traces: no GPU runs here.

    python benchmarks/recurring.py                 # tables; exit 1 if a target is missed
    python benchmarks/recurring.py --markdown      # the README table
    python benchmarks/recurring.py --json out.json # every figure
    python benchmarks/recurring.py --ablation      # Zeus's policy, then wattwise's changes one by one
    python benchmarks/recurring.py --ablation --seeds 40   # the same on seeds 1-40 (robustness)
    python benchmarks/recurring.py --validate      # knobs chosen on one GPU, reported on the other
    python benchmarks/recurring.py --validate --markdown   # the README's validation tables
    python benchmarks/recurring.py --noise 0.03    # figures that vary by 3% per epoch, as on real GPUs

`--validate` (see `recurring_validation.py`) is the out-of-sample view: the tables above are in sample,
the policy's defaults having been set on these same traces.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import recurring_validation as validation
from recurring_workloads import BETA, ETA, GPUS, TARGET_MAX, TARGET_MEAN, WORKLOADS, Workload

from wattwise.recurring.policy import POLICIES, PolicyConfig
from wattwise.recurring.simulator import job_for_trace, simulate
from wattwise.recurring.trace import load_trace
from wattwise.tools.checks import markdown_table as table_lines

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = REPO.parent / "shared" / "data" / "zeus-traces"
SEEDS = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class Cell:
    """One (GPU, workload, seed, policy) simulation: totals in joules and seconds."""

    gpu: str
    workload: str
    seed: int
    policy: str
    recurrences: int
    default_energy_j: float
    default_cost: float
    energy_j: float
    cost: float
    oracle_energy_j: float
    oracle_cost: float
    runs: int
    failed_runs: int


#: From Zeus's policy to wattwise's, one change at a time (each step keeps the previous ones).
ABLATION: tuple[tuple[str, PolicyConfig], ...] = (
    ("Zeus: 2 pruning rounds, prune on failure, per-batch-size Gaussian TS", POLICIES["zeus"]),
    (
        "1 pruning round",
        PolicyConfig(pruning_rounds=1, prune_margin=None, bandit="per-arm", resume_exploration=False),
    ),
    ("+ line-search pruning (margin 0.5)", PolicyConfig(bandit="per-arm", resume_exploration=False)),
    ("+ shared-epochs bandit, failures charged their retry", PolicyConfig(resume_exploration=False)),
    ("+ resume pruned exploration (= wattwise)", POLICIES["wattwise"]),
)


def run_cell(traces: Path, gpu: str, workload: Workload, seed: int, policy: str, noise: float = 0.0) -> Cell:
    trace = load_trace(
        traces / "summary_train.csv", traces / f"summary_power_{gpu}.csv", workload.name, workload.target_metric
    )
    spec = job_for_trace(
        trace,
        default_batch_size=workload.default_batch_size,
        max_epochs=workload.max_epochs,
        eta=ETA,
        beta=BETA,
    )
    recurrences = 2 * len(trace.batch_sizes) * len(trace.power_limits_w)
    config = dict(ABLATION)[policy] if policy in dict(ABLATION) else POLICIES[policy]
    result = simulate(trace, spec, recurrences, seed, policy=config, noise=noise)
    return Cell(
        gpu=gpu,
        workload=workload.name,
        seed=seed,
        policy=policy,
        recurrences=recurrences,
        default_energy_j=result.default.energy_j,
        default_cost=result.default.cost,
        energy_j=result.wattwise.energy_j,
        cost=result.wattwise.cost,
        oracle_energy_j=result.oracle.energy_j,
        oracle_cost=result.oracle.cost,
        runs=len(result.history),
        failed_runs=sum(not r.reached for r in result.history),
    )


@dataclass(frozen=True)
class Row:
    """One workload on one GPU, summed over the seeds."""

    workload: str
    recurrences: int
    default_energy_j: float
    wattwise_energy_j: float
    oracle_energy_j: float
    default_cost: float
    wattwise_cost: float
    oracle_cost: float
    zeus_cost: float | None

    @property
    def default_ratio(self) -> float:
        return self.default_cost / self.oracle_cost

    @property
    def wattwise_ratio(self) -> float:
        return self.wattwise_cost / self.oracle_cost

    @property
    def zeus_ratio(self) -> float | None:
        return None if self.zeus_cost is None else self.zeus_cost / self.oracle_cost


def rows(cells: list[Cell], gpu: str) -> list[Row]:
    result = []
    for workload in WORKLOADS:
        mine = [c for c in cells if c.gpu == gpu and c.workload == workload.name]
        ours = [c for c in mine if c.policy == "wattwise"]
        zeus = [c for c in mine if c.policy == "zeus"]
        result.append(
            Row(
                workload=workload.name.split("/")[0],
                recurrences=ours[0].recurrences,
                default_energy_j=math.fsum(c.default_energy_j for c in ours),
                wattwise_energy_j=math.fsum(c.energy_j for c in ours),
                oracle_energy_j=math.fsum(c.oracle_energy_j for c in ours),
                default_cost=math.fsum(c.default_cost for c in ours),
                wattwise_cost=math.fsum(c.cost for c in ours),
                oracle_cost=math.fsum(c.oracle_cost for c in ours),
                zeus_cost=math.fsum(c.cost for c in zeus) if zeus else None,
            )
        )
    return result


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


#: The tables' columns: the text table's heading and width, and the Markdown table's heading.
COLUMNS = (
    ("workload", 13, "workload"),
    ("R", 4, "R"),
    ("E default", 10, "energy default"),
    ("E wattwise", 10, "energy wattwise"),
    ("E oracle", 9, "energy oracle"),
    ("C default", 10, "cost default"),
    ("C wattwise", 10, "cost wattwise"),
    ("C oracle", 9, "cost oracle"),
    ("default/or", 10, "default / oracle"),
    ("wattwise/or", 11, "wattwise / oracle"),
    ("zeus/or", 8, "Zeus policy / oracle"),
)
#: The column of wattwise's cost against the oracle's (in bold in the Markdown table).
WATTWISE_COLUMN = 9


def table_cells(table: list[Row]) -> list[list[str]]:
    """The cells of each workload's row, then of the mean over the workloads (energy and cost in MJ)."""

    def ratio(value: float | None) -> str:
        return f"{value:.3f}" if value is not None else "-"

    cells = [
        [
            r.workload,
            str(r.recurrences),
            *(f"{v / 1e6:.1f}" for v in (r.default_energy_j, r.wattwise_energy_j, r.oracle_energy_j)),
            *(f"{v / 1e6:.1f}" for v in (r.default_cost, r.wattwise_cost, r.oracle_cost)),
            ratio(r.default_ratio),
            ratio(r.wattwise_ratio),
            ratio(r.zeus_ratio),
        ]
        for r in table
    ]
    zeus_ratios = [r.zeus_ratio for r in table if r.zeus_ratio is not None]
    means = [_mean([r.default_ratio for r in table]), _mean([r.wattwise_ratio for r in table])]
    cells.append(["mean", *[""] * 7, *(ratio(m) for m in means), ratio(_mean(zeus_ratios) if zeus_ratios else None)])
    return cells


def text_table(gpu: str, table: list[Row]) -> str:
    def line(cells: list[str]) -> str:
        return " ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, (_, width, _)) in enumerate(zip(cells, COLUMNS, strict=True))
        )

    lines = [
        f"{gpu.upper()}: cumulative over seeds {SEEDS[0]}-{SEEDS[-1]} (energy in MJ, cost in MJ)",
        line([heading for heading, _, _ in COLUMNS]),
        *(line(cells) for cells in table_cells(table)),
    ]
    return "\n".join(lines)


def markdown_table(gpu: str, table: list[Row]) -> str:
    cells = table_cells(table)
    for row in cells:
        row[WATTWISE_COLUMN] = f"**{row[WATTWISE_COLUMN]}**"
    cells[-1][0] = f"**{cells[-1][0]}**"
    lines = [
        f"**{gpu.upper()}** (sums over seeds {SEEDS[0]}-{SEEDS[-1]}; energy and cost in MJ)",
        "",
        *table_lines([heading for _, _, heading in COLUMNS], cells),
    ]
    return "\n".join(lines)


def ablation(traces: Path, seeds: tuple[int, ...], workers: int) -> None:
    """Mean and worst workload (cost / oracle, summed over `seeds`) per GPU for each `ABLATION` step."""
    tasks = [(traces, g, w, s, name) for name, _ in ABLATION for g in GPUS for w in WORKLOADS for s in seeds]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        cells = list(pool.map(run_cell, *zip(*tasks, strict=True)))
    print(f"cost / oracle, summed over seeds {seeds[0]}-{seeds[-1]}: mean over workloads (worst workload)")
    print(f"{'policy':<70} {'V100':>15} {'A40':>15}")
    for name, _ in ABLATION:
        figures = []
        for gpu in GPUS:
            ratios = []
            for workload in WORKLOADS:
                mine = [c for c in cells if c.policy == name and c.gpu == gpu and c.workload == workload.name]
                ratios.append(math.fsum(c.cost for c in mine) / math.fsum(c.oracle_cost for c in mine))
            figures.append(f"{_mean(ratios):.3f} ({max(ratios):.3f})")
        print(f"{name:<70} {figures[0]:>15} {figures[1]:>15}")


def validate(traces: Path, workers: int, *, markdown: bool) -> int:
    """Print the out-of-sample validation; 1 when an out-of-sample target is missed."""
    result = validation.validate(traces, workers)
    print(validation.markdown_report(result) if markdown else validation.text_report(result))
    print(f"\nvalidation took {result.elapsed_s:.0f} s with {workers} workers")
    return 1 if validation.missed_targets(result) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="directory of Zeus's trace CSVs")
    parser.add_argument("--no-zeus", action="store_true", help="skip the Zeus-policy comparison (half the time)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--json", type=Path, help="also write every simulation's figures to this file")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--ablation", action="store_true", help="measure wattwise's changes to Zeus one by one")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 1..N for --ablation (default 5)")
    parser.add_argument("--validate", action="store_true", help="choose the knobs on one GPU, report the other")
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="vary each epoch's time and power by this fraction (e.g. 0.03), as measured on real GPUs",
    )
    args = parser.parse_args(argv)
    if not (args.traces / "summary_train.csv").is_file():
        parser.error(f"--traces {args.traces}: no summary_train.csv there (Zeus's traces, see ../shared/data)")
    if args.ablation:
        ablation(args.traces, tuple(range(1, args.seeds + 1)), args.workers)
        return 0
    if args.validate:
        return validate(args.traces, args.workers, markdown=args.markdown)

    policies = ("wattwise",) if args.no_zeus else ("wattwise", "zeus")
    tasks = [(args.traces, g, w, s, p, args.noise) for g in GPUS for w in WORKLOADS for s in SEEDS for p in policies]
    started = time.monotonic()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        cells = list(pool.map(run_cell, *zip(*tasks, strict=True)))
    elapsed_s = time.monotonic() - started

    missed = []
    for gpu in GPUS:
        table = rows(cells, gpu)
        print(markdown_table(gpu, table) if args.markdown else text_table(gpu, table))
        print()
        ratios = [r.wattwise_ratio for r in table]
        if _mean(ratios) > TARGET_MEAN or max(ratios) > TARGET_MAX:
            missed.append(f"{gpu}: mean {_mean(ratios):.3f}, worst {max(ratios):.3f}")
    print(
        f"{len(cells)} simulations ({len(GPUS)} GPUs x {len(WORKLOADS)} workloads x {len(SEEDS)} seeds x "
        f"{len(policies)} policies) in {elapsed_s:.1f} s with {args.workers} workers"
    )
    print(
        f"targets (wattwise cost / oracle): mean <= {TARGET_MEAN}, every workload <= {TARGET_MAX}: "
        + ("met" if not missed else "MISSED: " + "; ".join(missed))
    )
    if args.json:
        args.json.write_text(json.dumps([c.__dict__ for c in cells], indent=2))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
