"""Plan GPU frequencies for a pipeline-parallel job from a measured per-stage profile (Perseus).

    wattwise example-data data
    python examples/pipeline_plan.py data/gpt3-175b+a100_sxm_bf16.csv --microbatches 12

Computes the time-energy frontier of one 1F1B iteration, then two plans: the least energy with no
slowdown (intrinsic bloat), and the least energy when a straggler makes every iteration take 1.2 times
as long (extrinsic bloat). The profile is GPT-3 175B on A100s, measured by the Perseus authors.
"""

from __future__ import annotations

import argparse

from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import assemble_frontier, choose_for_straggler, choose_intrinsic
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import load_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="CSV stage,instruction,frequency,time,energy")
    parser.add_argument("--microbatches", type=int, default=12)
    parser.add_argument("--p-blocking", type=float, default=83.64, help="W of a GPU blocked on communication")
    parser.add_argument("--unit-time", type=float, default=0.001, help="s between the frontier's deadlines")
    args = parser.parse_args()

    profile = load_profile(args.profile)
    problem = PlanningProblem.build(
        profile, pipeline_dag("1f1b", profile.num_stages, args.microbatches), p_blocking_w=args.p_blocking
    )
    points = list(FrontierSolver(problem, unit_time_s=args.unit_time).run())
    frontier = assemble_frontier(problem, points, unit_time_s=args.unit_time, solver="fast", plans="some")
    fastest = choose_intrinsic(frontier)
    print(
        f"frontier: {len(frontier.points)} plans, {frontier.points[0].time_s:.3f} s to "
        f"{frontier.points[-1].time_s:.3f} s per iteration"
    )
    print(f"no slowdown: {fastest.energy_j:.0f} J per iteration, saving {fastest.saving:.1%}")
    straggler = choose_for_straggler(frontier, 1.2 * frontier.max_frequency_time_s)
    print(f"straggler at 1.2x: {straggler.energy_j:.0f} J per iteration, saving {straggler.saving:.1%}")


if __name__ == "__main__":
    main()
