"""`wattwise simulate`: the recurring-job optimizer against real GPU traces (Zeus's format).

Runs the same `BatchSizeOptimizer` a training job uses, with the clock and the GPU replaced by the
trace, and compares it with the default batch size at the highest power limit and with the oracle
(the least-cost fixed setting in hindsight). Every figure is simulated from measured traces; no GPU runs.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.readable import columns_of, table_lines
from wattwise.recurring.simulator import SimulationResult, job_for_trace, simulate
from wattwise.recurring.spec import JobSpec
from wattwise.recurring.trace import WorkloadTrace, load_trace
from wattwise.safe_files import json_text

#: `JobSpec` fields -> the flags that set them, for error messages.
SETTING_FLAGS: dict[str, str] = {
    "default_batch_size": "--default-batch-size",
    "target_metric": "--target-metric",
    "max_epochs": "--max-epochs",
    "eta": "--eta",
    "beta": "--beta",
}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise simulate` command to the `wattwise` parser."""
    parser = add_command(subparsers, "simulate")
    parser.add_argument("--train", required=True, type=Path, help="summary_train.csv (Zeus's train trace)")
    parser.add_argument("--power", required=True, type=Path, help="summary_power_<gpu>.csv (Zeus's power trace)")
    parser.add_argument("--workload", required=True, help="DATASET/NETWORK, e.g. cifar100/shufflenetv2")
    parser.add_argument("--optimizer", help="the trace's optimizer column, when the workload has several")
    parser.add_argument(
        "--default-batch-size",
        required=True,
        type=int,
        help="the job's default batch size (one larger than any traced becomes the largest traced)",
    )
    parser.add_argument("--target-metric", required=True, type=float, help="target validation metric")
    parser.add_argument("--max-epochs", required=True, type=int, help="a run fails after this many epochs")
    parser.add_argument(
        "--recurrences",
        type=int,
        help="how many times the job recurs (default: 2 x batch sizes x power limits, as in Zeus)",
    )
    parser.add_argument("--eta", type=float, default=0.5, help="energy-time trade-off in [0, 1] (default 0.5)")
    parser.add_argument("--beta", type=float, default=2.0, help="early-stop at beta x least cost (default 2.0)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON: policies, ratios and every run")
    parser.set_defaults(func=run, setting_flags=SETTING_FLAGS)


def default_recurrences(trace: WorkloadTrace) -> int:
    """Zeus's choice: twice the number of (batch size, power limit) settings."""
    return 2 * len(trace.batch_sizes) * len(trace.power_limits_w)


def result_dict(
    trace: WorkloadTrace, spec: JobSpec, recurrences: int, seed: int, result: SimulationResult
) -> dict[str, Any]:
    """The JSON answer: settings, the three policies' totals and cost ratios, and every run."""
    oracle_cost = result.oracle.cost
    return {
        "workload": f"{trace.dataset}/{trace.network}",
        "optimizer": trace.optimizer,
        "target_metric": trace.target_metric,
        "default_batch_size": spec.default_batch_size,
        "batch_sizes": list(spec.batch_sizes),
        "power_limits_w": list(trace.power_limits_w),
        "max_power_w": spec.max_power_w,
        "max_epochs": spec.max_epochs,
        "recurrences": recurrences,
        "eta": spec.eta,
        "beta": spec.beta,
        "seed": seed,
        "simulated": True,
        "policies": {
            "default": {
                **asdict(result.default),
                "batch_size": spec.default_batch_size,
                "power_limit_w": trace.power[spec.default_batch_size][-1].power_limit_w,
                "cost_ratio": result.default.cost / oracle_cost,
            },
            "wattwise": {
                **asdict(result.wattwise),
                "runs": len(result.history),
                "failed_runs": sum(not r.reached for r in result.history),
                "cost_ratio": result.wattwise.cost / oracle_cost,
            },
            "oracle": {
                **asdict(result.oracle),
                "batch_size": result.oracle_setting.batch_size,
                "power_limit_w": result.oracle_setting.power_limit_w,
                "cost_ratio": 1.0,
            },
        },
        "history": [asdict(run) for run in result.history],
    }


def run(args: argparse.Namespace) -> int:
    """Run `wattwise simulate` with its parsed arguments.

    Returns:
        The exit status.
    """
    if not 0 <= args.seed < 2**63:
        raise UsageError(f"--seed must be a whole number from 0 to 2**63 - 1 (got {args.seed})")
    trace = load_trace(args.train, args.power, args.workload, args.target_metric, args.optimizer)
    spec = job_for_trace(
        trace, default_batch_size=args.default_batch_size, max_epochs=args.max_epochs, eta=args.eta, beta=args.beta
    )
    recurrences = default_recurrences(trace) if args.recurrences is None else args.recurrences
    if recurrences < 1:
        raise UsageError(f"--recurrences must be at least 1 (got {recurrences})")
    result = simulate(trace, spec, recurrences, args.seed)
    payload = result_dict(trace, spec, recurrences, args.seed, result)
    if args.json:
        print(json_text(payload))
        return 0
    print(
        f"{payload['workload']} (simulated from traces): {recurrences} recurrences, target {trace.target_metric:g}, "
        f"default batch size {spec.default_batch_size}, eta {spec.eta:g}, beta {spec.beta:g}, seed {args.seed}"
    )
    columns = columns_of("policy:<9", "energy (J):>12", "time (s):>12", "cost (J):>12", "cost/oracle:>11")
    rows = [
        (name, f"{t['energy_j']:.4g}", f"{t['time_s']:.4g}", f"{t['cost']:.4g}", f"{t['cost_ratio']:.3f}")
        for name, t in payload["policies"].items()
    ]
    print("\n".join(table_lines(columns, rows)))
    oracle = payload["policies"]["oracle"]
    failed = payload["policies"]["wattwise"]["failed_runs"]
    print(
        f"oracle: batch size {oracle['batch_size']} at {oracle['power_limit_w']:g} W; wattwise made "
        f"{len(result.history)} runs ({failed} failed)"
    )
    return 0
