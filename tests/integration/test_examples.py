"""Every script in examples/ runs on the CPU with the simulated GPU and does what its docstring says."""

from __future__ import annotations

import json
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
    done = subprocess.run([sys.executable, str(EXAMPLES / args[0]), *args[1:]], cwd=tmp_path, env=environ,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def summary(path: Path) -> dict:
    return json.loads(path.read_text())


def assert_tuned(record: dict, steps: int) -> None:
    assert record["status"] == "completed"
    assert record["simulated"] is True
    assert record["steps"] == steps
    tuning = record["power_limit"]["tuning"]
    assert tuning["finished"] is True
    assert record["power_limit"]["chosen_power_limit_w"] in tuning["profiled"]


def test_lightning_example_tunes_the_power_limit(tmp_path: Path) -> None:
    run_example(tmp_path, "lightning_train.py", "--mode", "tune", "--max-steps", "100")
    record = summary(tmp_path / "wattwise_runs" / "lightning" / "summary.json")
    assert record["framework"] == "lightning"
    assert_tuned(record, 100)


def test_accelerate_example_tunes_with_the_flag_alone(tmp_path: Path) -> None:
    out = run_example(tmp_path, "accelerate_train.py", "--epochs", "1", ACCELERATE_ENERGY="1",
                      ACCELERATE_ENERGY_MODE="tune")
    assert "epoch 0: loss" in out
    record = summary(tmp_path / "wattwise_runs" / "summary.json")
    assert record["framework"] == "accelerate"
    assert_tuned(record, 128)


def test_trainer_example_is_measured_with_no_line_of_its_own(tmp_path: Path) -> None:
    run_example(tmp_path, "trainer_train.py", ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_MODE="tune")
    assert_tuned(summary(tmp_path / "wattwise_runs" / "summary.json"), 120)


def test_recurring_example_records_each_run_for_the_next(tmp_path: Path) -> None:
    for _ in range(2):
        run_example(tmp_path, "recurring_job.py", "--max-epochs", "3")
    shown = subprocess.run([sys.executable, "-m", "wattwise", "jobs", "show", "regression", "--json"],
                           env={**os.environ, "WATTWISE_HOME": str(tmp_path / "home")}, capture_output=True,
                           text=True, check=True).stdout
    runs = json.loads(shown)["runs"]
    assert len(runs) == 2
    assert all(r["energy_j"] > 0 for r in runs)
    # The first run of a batch size tunes its limit; the job remembers it for that batch size.
    assert runs[0]["power_limit_w"] is not None


def test_pipeline_example_plans_from_the_shipped_profile(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "wattwise", "example-data", str(tmp_path / "data")], check=True,
                   capture_output=True)
    out = run_example(tmp_path, "pipeline_plan.py", str(tmp_path / "data" / "gpt3-175b+a100_sxm_bf16.csv"))
    # The Perseus GPT-3 profile at 8 stages x 12 microbatches (the benchmarks' figures).
    assert "no slowdown: 6169 J per iteration, saving 15.9%" in out
    assert "straggler at 1.2x: 5610 J per iteration, saving 27.3%" in out
