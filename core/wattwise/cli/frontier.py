"""`wattwise frontier`: the time-energy frontier of a pipeline from a per-stage profile.

    wattwise frontier PROFILE.csv --microbatches M [--schedule 1f1b|gpipe] --unit-time U --p-blocking W
        [--solver fast|exact] --out FRONTIER.json [--csv FRONTIER.csv] [--plot FRONTIER.png]
        [--plans some|all] [--time-limit S] [--quiet]

Progress goes to stderr (at most once a second, and a last line), unless --quiet; a summary goes to
stdout. Every time and energy written is a real plan's, computed from the profile. Flags are checked here,
so errors name them; errors of the profile's content come from `wattwise.pipeline` and name its fields.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.pipeline.dag import check_dag_size, pipeline_dag
from wattwise.pipeline.files import write_frontier_csv, write_frontier_json
from wattwise.pipeline.frontier import FrontierSolver, NonDominated, check_frontier_size
from wattwise.pipeline.plan import Frontier, assemble_frontier, choose_intrinsic
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import load_profile
from wattwise.pipeline.schedule import SCHEDULES
from wattwise.vocabulary import SolverName

T = TypeVar("T")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise frontier` command to the `wattwise` parser."""
    parser = add_command(subparsers, "frontier")
    parser.add_argument("profile", metavar="PROFILE.csv", help="stage,instruction,frequency,time,energy CSV")
    parser.add_argument("--microbatches", type=int, required=True, metavar="M", help="microbatches per iteration")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b", help="pipeline schedule (1f1b)")
    parser.add_argument(
        "--unit-time",
        type=float,
        required=True,
        metavar="U",
        help="seconds between two deadlines of the frontier (e.g. 0.001)",
    )
    parser.add_argument(
        "--p-blocking", type=float, required=True, metavar="W", help="power (W) of a GPU blocked on communication"
    )
    parser.add_argument(
        "--solver",
        choices=tuple(SolverName),
        default=SolverName.FAST,
        help="fast (default) or exact (CP-SAT, small pipelines)",
    )
    parser.add_argument("--out", required=True, metavar="FRONTIER.json", help="where to write the frontier")
    parser.add_argument("--csv", metavar="FRONTIER.csv", help="also write time_s,energy_j,has_plan rows")
    parser.add_argument("--plot", metavar="FRONTIER.png", help="also plot the frontier and two timelines")
    parser.add_argument(
        "--plans",
        choices=("some", "all"),
        default="some",
        help="which points also write their plan out as readable lists: some (default: "
        "about 35, incl. the intrinsic choice) or all; every plan is in plan_matrix "
        "either way",
    )
    parser.add_argument(
        "--time-limit", type=float, default=10.0, metavar="S", help="exact solver: seconds per deadline (default 10)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise frontier` with its parsed arguments.

    Returns:
        The exit status.
    """
    if args.microbatches < 1:
        raise UsageError(f"--microbatches must be a positive integer (got {args.microbatches})")
    if not (math.isfinite(args.unit_time) and args.unit_time > 0):
        raise UsageError(f"--unit-time must be a positive number of seconds (got {args.unit_time})")
    if not (math.isfinite(args.p_blocking) and args.p_blocking >= 0):
        raise UsageError(f"--p-blocking must be a finite number of watts >= 0 (got {args.p_blocking})")
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise UsageError(f"--time-limit must be a positive number of seconds (got {args.time_limit})")
    for flag, path, name in (
        ("--out", args.out, "frontier.json"),
        ("--csv", args.csv, "frontier.csv"),
        ("--plot", args.plot, "frontier.png"),
    ):
        if path is not None and os.path.isdir(path):  # checked before solving, which may take minutes
            raise UsageError(f"{flag} {path} is a directory; name the file to write, e.g. {os.path.join(path, name)}")
    profile = load_profile(args.profile)
    check_dag_size(profile.num_stages, args.microbatches, option="--microbatches")
    dag = pipeline_dag(args.schedule, profile.num_stages, args.microbatches)
    problem = PlanningProblem.build(profile, dag, args.p_blocking)
    check_frontier_size(problem, args.unit_time, option="--unit-time", microbatches_option="--microbatches")
    started = time.monotonic()
    # Only the points no other beats on time and on sum(e - P_b * t) are held as they stream in (the
    # sense of `assemble_frontier`): memory follows the frontier, not the number of deadlines.
    kept: NonDominated[Any] = NonDominated(problem.p_blocking_w * problem.dag.num_stages)
    if args.solver == SolverName.FAST:
        solver = FrontierSolver(problem, args.unit_time)
        for point in _progress(solver.run(), lambda _: f"{solver.rounded}/{solver.num_points}", args.quiet, started):
            kept.add(point)
    else:
        from wattwise.pipeline.exact import exact_frontier  # CP-SAT: imported only for --solver exact

        low = exact_frontier(problem, args.unit_time, time_limit_s=args.time_limit)
        solved = not_proven = 0
        for result in _progress(low, str, args.quiet, started):
            solved += 1
            not_proven += result.status != "OPTIMAL"
            if result.has_plan:
                kept.add(result)
        if not_proven and not args.quiet:
            print(
                f"wattwise frontier: {not_proven} of {solved} deadlines not proven optimal within "
                f"--time-limit {args.time_limit} s",
                file=sys.stderr,
            )
    frontier = assemble_frontier(
        problem, kept.points(), unit_time_s=args.unit_time, solver=args.solver, plans=args.plans
    )
    elapsed_s = time.monotonic() - started
    write_frontier_json(frontier, args.out)
    if args.csv:
        write_frontier_csv(frontier, args.csv)
    if args.plot:
        from wattwise.pipeline.plot import plot_frontier

        try:
            plot_frontier(problem, frontier, args.plot)
        except UsageError as err:
            raise UsageError(f"{err} (or drop --plot)") from None
    print(summary(frontier, elapsed_s))
    return 0


def summary(frontier: Frontier, elapsed_s: float) -> str:
    """One paragraph for stdout: size of the frontier and the intrinsic saving."""
    written = sum(1 for p in frontier.points if p.plan is not None)
    planned = sum(1 for k in range(len(frontier.points)) if frontier.has_plan(k))
    lines = [
        f"{len(frontier.points)} points ({planned} with a plan, {written} written out), "
        f"{frontier.points[0].time_s:.6g} s to "
        f"{frontier.points[-1].time_s:.6g} s per iteration, solved in {elapsed_s:.2f} s ({frontier.solver})",
        f"maximum frequency: {frontier.max_frequency_time_s:.6g} s, {frontier.max_frequency_energy_j:.6g} J",
    ]
    choice = choose_intrinsic(frontier)
    lines.append(
        f"no slowdown: {choice.energy_j:.6g} J at {choice.entry.time_s:.6g} s ({choice.saving:.2%} less energy)"
    )
    return "\n".join(lines)


def _progress(items: Iterable[T], done: Callable[[int], str], quiet: bool, started: float) -> Iterator[T]:
    """Pass items through, printing progress on stderr at most once a second and at the end.

    The line is `done(items so far)`.
    """
    count = 0
    last = started
    for item in items:
        count += 1
        now = time.monotonic()
        if not quiet and now - last >= 1.0:
            last = now
            print(f"wattwise frontier: {done(count)} deadlines, {now - started:.1f} s", file=sys.stderr, flush=True)
        yield item
    if not quiet:
        print(
            f"wattwise frontier: {done(count)} deadlines solved in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
