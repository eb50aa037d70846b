"""The scripts in examples/ that no page of the docs runs: each runs on the CPU and does what it says.

The others (the Lightning, Accelerate, Trainer and recurring-job examples) run as the getting-started and
recurring guides run them, with their results checked there (test_docs_snippets.py's `EXPECTED`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"


def run_example(tmp_path: Path, *args: str, **env: str) -> str:
    """Run `python examples/<args>` in `tmp_path` on the simulated GPU; its output, or fail with it."""
    environ = {**os.environ, "WATTWISE_BACKEND": "simulated", "WATTWISE_HOME": str(tmp_path / "home"), **env}
    environ.pop("WATTWISE_STORE", None)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / args[0]), *args[1:]],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_pipeline_example_plans_from_the_shipped_profile(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "wattwise", "example-data", str(tmp_path / "data")], check=True, capture_output=True
    )
    out = run_example(tmp_path, "pipeline_plan.py", str(tmp_path / "data" / "gpt3-175b+a100_sxm_bf16.csv"))
    # The Perseus GPT-3 profile at 8 stages x 12 microbatches (the benchmarks' figures).
    assert "no slowdown: 6169 J per iteration, saving 15.9%" in out
    assert "straggler at 1.2x: 5610 J per iteration, saving 27.3%" in out
