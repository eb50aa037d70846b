"""What an Accelerate user checks of wattwise on a plain loop with Accelerate's own regression model.

A step is an optimizer step; a step that does not log is free (no synchronize, no counter read, no
collective); evaluation, checkpoints and marked stretches are left out of step and profile figures;
tuning cut short says so; checkpoints load whether wattwise was on or off when they were saved.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.accelerate_fixtures import QUIET, summary
from tests.support.network import free_port
from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "accelerate_hot_path.py"

pytestmark = pytest.mark.usefixtures("fresh_accelerate")


# -- 6. two processes ---------------------------------------------------------------------------------


def test_two_processes_make_collectives_only_at_logging_points(tmp_path):
    """Both processes of a gloo run, started as a launcher starts them, count what they call."""
    steps = 200
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE")}
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        WATTWISE_HOME=str(tmp_path / "home"),
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_BACKEND="simulated",
        ACCELERATE_ENERGY_OUTPUT_DIR=str(tmp_path / "run"),
        ACCELERATE_ENERGY_LOG_EVERY_N_STEPS="50",
        ACCELERATE_ENERGY_OVERRIDES=" ".join(QUIET),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        OMP_NUM_THREADS="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), str(steps)],
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
        )
        for rank in (0, 1)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=120)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0, 0], "\n".join(outputs)

    counts = [
        json.loads(line.split(" ", 1)[1])
        for out in outputs
        for line in out.splitlines()
        if line.startswith("COLLECTIVES ")
    ]
    assert len(counts) == 2 and counts[0] == counts[1], counts  # every process meets the same ones
    training = counts[0]["training"]
    assert 1 <= sum(training.values()) <= steps // 50 + 2, training
    assert summary(tmp_path)["steps"] == steps and summary(tmp_path)["world_size"] == 2
