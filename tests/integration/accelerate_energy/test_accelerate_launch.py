"""`accelerate launch --multi_gpu --num_processes 2 examples/accelerate_train.py`, with and without the flag.

Without GPUs the example's `Accelerator(cpu=True)` makes the two processes train over gloo, each with its
own simulated GPU (its local rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.network import free_port
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "accelerate_train.py"
TUNE_YAML = "power_limit:\n  wait_steps: 1\n  warmup_steps: 1\n  profile_steps: 2\n  step_w: 100\n"
#: 1024 samples over 2 processes in batches of 32; tuning takes 1 + 3 * (1 + 2) = 10 of them.
STEPS = 16


def launch(tmp: Path, energy_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE")}
    # No user `accelerate config` and no wattwise state from outside the test.
    env.update(HF_HOME=str(tmp / "hf"), WATTWISE_HOME=str(tmp / "home"), **energy_env)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        str(EXAMPLE),
        "--epochs",
        "1",
        "--dataset-size",
        "1024",
    ]
    proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    on, off = tmp_path_factory.mktemp("flag_on"), tmp_path_factory.mktemp("flag_off")
    (on / "tune.yaml").write_text(TUNE_YAML)
    settings = {
        "ACCELERATE_ENERGY_MODE": "tune",
        "ACCELERATE_ENERGY_BACKEND": "simulated",
        "ACCELERATE_ENERGY_CONFIG": str(on / "tune.yaml"),
    }
    return {
        "on": (on, launch(on, {"ACCELERATE_ENERGY": "1", "ACCELERATE_ENERGY_OUTPUT_DIR": str(on / "run"), **settings})),
        # Every other variable set, only the flag missing.
        "off": (off, launch(off, {"ACCELERATE_ENERGY_OUTPUT_DIR": str(off / "run"), **settings})),
    }


def test_two_processes_measure_tune_and_write_one_summary_of_both(runs):
    tmp, proc = runs["on"]
    out = tmp / "run"
    # One summary in the output folder, of both processes; the run's own folder (runs/<id>/) keeps that same
    # file, and nothing else wrote one.
    [kept] = list((out / "runs").glob("*/summary.json"))
    assert sorted(tmp.rglob("summary.json")) == sorted([out / "summary.json", kept])
    assert kept.read_bytes() == (out / "summary.json").read_bytes()
    s = json.loads((out / "summary.json").read_text())
    assert s["world_size"] == 2 and s["simulated"] is True and s["steps"] == STEPS
    assert set(s["energy_per_device_j"]) == {"rank0/gpu0", "rank1/gpu1"}
    assert all(e > 0 for e in s["energy_per_device_j"].values())
    assert s["energy_j"] == pytest.approx(sum(s["energy_per_device_j"].values()))
    pl = s["power_limit"]
    assert [e["power_limit_w"] for e in pl["profile"]] == [300.0, 200.0, 100.0]
    assert pl["chosen_power_limit_w"] in (300.0, 200.0, 100.0)
    # Each process restored its own GPU.
    for i in (0, 1):
        assert json.loads((tmp / "home" / "simulated" / f"gpu{i}.json").read_text())["power_limit_w"] == 300.0
    assert "accelerate run completed" in proc.stderr


def test_without_the_flag_the_script_runs_unchanged(runs):
    tmp, proc = runs["off"]
    assert not (tmp / "run").exists() and not (tmp / "wattwise_runs").exists() and not (tmp / "home").exists()
    assert "simulated GPU" not in proc.stdout + proc.stderr and "run completed" not in proc.stderr
    loss_lines = [line for line in proc.stdout.splitlines() if line.startswith("epoch 0: loss")]
    assert len(loss_lines) == 1
    # Same training as with the flag on: wattwise changes power, not the maths.
    assert loss_lines[0] in runs["on"][1].stdout.splitlines()
