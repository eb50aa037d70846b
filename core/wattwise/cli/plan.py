"""`wattwise plan`: choose one frequency plan from a frontier.

    wattwise plan FRONTIER.json [--straggler-time T] --out PLAN.json

Without --straggler-time: the least energy with no slowdown against the maximum frequency (intrinsic
bloat). With it: the least energy when every GPU waits until T seconds anyway (a straggler elsewhere).
"""

from __future__ import annotations

import argparse

from wattwise.bounds import TIME_S
from wattwise.cli.main import add_command
from wattwise.pipeline.files import read_frontier_json, write_plan_json
from wattwise.pipeline.plan import choose_for_straggler, choose_intrinsic


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise plan` command to the `wattwise` parser."""
    parser = add_command(subparsers, "plan")
    parser.add_argument("frontier", metavar="FRONTIER.json", help="a frontier written by wattwise frontier")
    parser.add_argument("--straggler-time", type=float, metavar="T", help="iteration time (s) imposed by a straggler")
    parser.add_argument("--out", required=True, metavar="PLAN.json", help="where to write the chosen plan")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise plan` with its parsed arguments.

    Returns:
        The exit status.
    """
    frontier = read_frontier_json(args.frontier)
    if args.straggler_time is None:
        choice = choose_intrinsic(frontier)
        what = f"no slowdown ({choice.slowdown:+.2%} iteration time)"
    else:
        TIME_S.check(args.straggler_time, "--straggler-time")
        choice = choose_for_straggler(frontier, args.straggler_time)
        what = f"straggler at {args.straggler_time:.6g} s (plan takes {choice.entry.time_s:.6g} s)"
    write_plan_json(frontier, choice, args.out)
    print(
        f"{what}: {choice.energy_j:.6g} J per iteration, {choice.saving:.2%} less than maximum frequency "
        f"({choice.max_frequency_energy_j:.6g} J)"
    )
    return 0
