"""`wattwise demo`: power-limit tuning on the emulated workload and the simulated GPU."""

from __future__ import annotations

import argparse
import json

from wattwise.demo import DemoOptions, format_demo, run_demo


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="train a tiny model on the simulated GPU with power-limit tuning",
                       description="Train the emulated workload with the energy plugin tuning the power limit "
                                   "of a simulated GPU, then the same steps at the maximum limit, and compare.")
    d = DemoOptions()
    p.add_argument("--framework", default=d.framework, help="lightning (default) or accelerate")
    p.add_argument("--power-model", metavar="FILE.csv", default=None,
                   help="CSV power_limit,time,power (W, relative step time, average W); default: built-in")
    p.add_argument("--selector", default=d.selector, help="cost (default), energy, time or slowdown")
    p.add_argument("--eta", type=float, default=d.eta, help="weight of energy against time, 0..1 (default 0.5)")
    p.add_argument("--max-slowdown", type=float, default=d.max_slowdown,
                   help="for --selector slowdown: largest step-time increase, e.g. 0.1 (default)")
    p.add_argument("--steps-after-tuning", type=int, default=d.steps_after_tuning)
    p.add_argument("--profile-steps", type=int, default=d.profile_steps)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--step-w", type=float, default=d.step_w, help="distance between profiled limits (W)")
    p.add_argument("--base-step-time", type=float, default=d.base_step_time_s,
                   help="seconds of one emulated step at the maximum limit (default 0.05)")
    p.add_argument("--output-dir", default=d.output_dir)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = DemoOptions(
        framework=args.framework, power_model=args.power_model, selector=args.selector, eta=args.eta,
        max_slowdown=args.max_slowdown, steps_after_tuning=args.steps_after_tuning,
        profile_steps=args.profile_steps, warmup_steps=args.warmup_steps, step_w=args.step_w,
        base_step_time_s=args.base_step_time, output_dir=args.output_dir)
    result = run_demo(options)
    print(json.dumps(result, indent=2) if args.json else format_demo(result))
    return 0
