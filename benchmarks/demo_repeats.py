"""`wattwise demo` repeated on the wall clock: does it choose alike, near the model's best, and pay back?

    python benchmarks/demo_repeats.py [--seeds 1-10] [--framework lightning] [--markdown]

Runs `wattwise demo --json` once per seed (`WATTWISE_SIMULATED_SEED`), each in a fresh process on the
simulated GPU's default physics, timed by the wall clock as a user runs it. Per seed: the chosen limit, what
it costs per step above the power model's own best limit (the demo knows the model), the tuning's
break-even, and each run's cost by the demo's own objective (tuned, tuning included, against the same steps
at the maximum limit). Targets: the same limit or its neighbour in at least 9 of 10 runs, the choice within
1% of the model's best in 10 of 10, and the tuned run cheaper than the baseline by the demo's objective.
The figures are simulated; the wall clock makes them follow the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def seeds_of(text: str) -> list[int]:
    """`1-10` or `1,3,5` as seeds."""
    if "-" in text:
        first, last = text.split("-", 1)
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",")]


def demo_once(seed: int, framework: str, folder: Path) -> dict[str, object]:
    """One `wattwise demo --json` in a fresh process; its result and its wall and CPU seconds."""
    env = {**os.environ, "WATTWISE_SIMULATED_SEED": str(seed), "WATTWISE_HOME": str(folder / "home")}
    env.pop("WATTWISE_SIMULATED_PHYSICS", None)  # the default physics, as a user gets it
    started = time.perf_counter()
    before = os.times()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wattwise.cli.main",
            "demo",
            "--json",
            "--framework",
            framework,
            "--output-dir",
            str(folder / "runs"),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"demo with seed {seed} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout)
    result["wall_s"] = time.perf_counter() - started
    result["cpu_s"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-10", help="seeds, e.g. 1-10 or 1,2,3 (default 1-10)")
    parser.add_argument("--framework", default="lightning")
    parser.add_argument("--markdown", action="store_true", help="print a table for docs/benchmarks.md")
    args = parser.parse_args()
    rows = []
    for seed in seeds_of(args.seeds):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append((seed, demo_once(seed, args.framework, Path(tmp))))
    chosen = collections.Counter(r["chosen_power_limit_w"] for _, r in rows)
    mode_w, _ = chosen.most_common(1)[0]
    near = sum(1 for _, r in rows if r["chosen_power_limit_w"] in (mode_w, mode_w - 25.0, mode_w + 25.0))
    within = sum(1 for _, r in rows if (r["modelled_cost_above_best"] or 0.0) <= 0.01)
    cheaper = sum(1 for _, r in rows if r["cost_j"] < r["baseline_cost_j"])
    if args.markdown:
        print(
            "| seed | chosen (W) | above the model's best | break-even (steps) | steps | tuned cost (J) "
            "| baseline cost (J) | wall (s) |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seed, r in rows:
        payback = r.get("payback") or {}
        line = (
            seed,
            r["chosen_power_limit_w"],
            100 * (r["modelled_cost_above_best"] or 0.0),
            payback.get("break_even_steps"),
            r["steps"],
            r["cost_j"],
            r["baseline_cost_j"],
            r["wall_s"],
        )
        if args.markdown:
            print("| {} | {:g} | {:.1f}% | {} | {} | {:,.0f} | {:,.0f} | {:.0f} |".format(*line))
        else:
            print(
                "seed {:>2}: {:g} W, {:.1f}% above the model's best, break-even {} steps, {} steps, "
                "cost {:,.0f} J against {:,.0f} J, {:.0f} s".format(*line)
            )
    n = len(rows)
    print(
        f"\nmodel's best: {rows[0][1]['modelled_best_power_limit_w']:g} W; {near}/{n} at {mode_w:g} W or its "
        f"neighbour; {within}/{n} within 1% of the model's best; {cheaper}/{n} tuned runs cheaper than the "
        f"baseline by the objective; {sum(r['cpu_s'] for _, r in rows):.0f} CPU-s in all"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
