"""Two processes whose own steps drive their simulated GPUs (`devices.simulated_drive=steps`) under a 100 W cap.

Rank 1 is slowed, so rank 0 waits for it in the gradient all-reduce every step. A step's work is what the
step itself did, never that wait: each step lasts its work stretched as the power model says at 100 W, and
the steps do not grow (counting the wait as work and stretching it made each step 1.6 times the last at
100 W, until the run stalled).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.network import free_port
from wattwise.devices import PowerModel

SCRIPT = Path(__file__).with_name("slowed_rank.py")
STEPS = 14
SLOWED_WORK_S = 0.03
CAP_W = 100.0


def test_a_rank_waiting_for_a_slowed_one_does_not_stretch_its_wait(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE")}
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        WATTWISE_HOME=str(tmp_path / "home"),
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_BACKEND="simulated",
        ACCELERATE_ENERGY_MODE="cap",
        ACCELERATE_ENERGY_CAP_W=str(CAP_W),
        ACCELERATE_ENERGY_OUTPUT_DIR=str(tmp_path / "run"),
        ACCELERATE_ENERGY_OVERRIDES="devices.simulated_drive=steps monitor.sample_power=false",
    )
    cmd = [
        *(sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu"),
        *("--num_processes", "2", "--main_process_port", str(free_port()), str(SCRIPT), str(STEPS)),
    ]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    walls = {
        int(line.split()[1]): [float(w) for w in line.split()[2:]]
        for line in proc.stdout.splitlines()
        if line.startswith("walls ")
    }
    assert sorted(walls) == [0, 1] and all(len(w) == STEPS for w in walls.values())
    # Both processes step together, each step the slowed rank's work stretched at 100 W (the modelled
    # factor, 2.6 on the default model); the run's steps after the first do not grow.
    factor = PowerModel.default().at_limit(CAP_W)[0]
    expected_s = SLOWED_WORK_S * factor
    for rank, steps in walls.items():
        later = steps[1:]
        assert max(later) < 2 * expected_s, (rank, steps)
        assert sum(later) / len(later) > 0.8 * expected_s, (rank, steps)  # still stretched: the cap shows
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["simulated_driven_by"] == "steps" and s["steps"] == STEPS
