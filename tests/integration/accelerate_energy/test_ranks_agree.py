"""Ranks must agree, under `accelerate launch` (multi-CPU, gloo) with `ACCELERATE_ENERGY=1`.

The run of the issue: one process's GPU was held by another wattwise process, that process degraded to
measurement only while the other tuned, and the run crashed with a collective mismatch (SIGABRT). For each
way one rank can differ: both processes train to the end, exit 0, one warning, the summary names the rank
and what failed there, and every GPU is back at its own limit. The example runs once per fault, one after the
other in the two processes of one launch.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support.network import free_port
from tests.support.paths import SCRIPTS_DIR
from tests.support.ranks_differ import FAILED, Runs, assert_warned_once, run_every_fault

SCRIPT = SCRIPTS_DIR / "ranks_differ_accelerate.py"
TUNE = (
    "power_limit.wait_steps=1 power_limit.warmup_steps=1 power_limit.profile_steps=2 power_limit.step_w=100 "
    "devices.simulated.base_step_time_s=0.01"
)
#: 1024 samples over 2 processes in batches of 32.
STEPS = 16


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The example once per fault, one after the other in the same two processes of one `accelerate launch`."""
    folder = tmp_path_factory.mktemp("ranks_differ_accelerate")
    home = folder / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE") and k != "PYTHONWARNINGS"}
    env.update(
        HF_HOME=str(folder / "hf"),
        WATTWISE_HOME=str(home),
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_MODE="tune",
        ACCELERATE_ENERGY_BACKEND="simulated",
        ACCELERATE_ENERGY_OVERRIDES=TUNE,
    )
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
        str(SCRIPT),
        str(home),
        str(folder / "run"),
        ",".join(sorted(FAILED)),
        "--epochs",
        "1",
        "--dataset-size",
        "1024",
    ]
    return run_every_fault(cmd, home, folder / "run", env)


@pytest.mark.parametrize("fault", sorted(FAILED))
def test_one_process_that_cannot_change_its_gpu_degrades_every_process_together(runs, fault):
    for rank in (0, 1):
        assert f"{fault} rank {rank} done" in runs.proc.stdout, runs.proc.stdout
    warned = runs.warnings_of(fault)
    assert len(warned) == 1, runs.proc.stderr[-3000:]
    summary = json.loads((runs.out / fault / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("completed", STEPS, 2)
    [note] = [n for n in summary["notes"] if "every process continues with measurement only" in n]
    assert note.startswith("rank 1: ") and FAILED[fault] in note and "rank 0" not in note
    assert_warned_once(fault, note, warned[0], summary)
    pl = summary["power_limit"]  # no process tuned to the end: no choice, and why tuning was abandoned
    assert pl["chosen_power_limit_w"] is None and pl["tuning"]["finished"] is False
    assert pl["tuning"]["reason"].startswith("abandoned: rank 1: ") and FAILED[fault] in pl["tuning"]["reason"]
    for gpu in ("gpu0", "gpu1"):  # every GPU is back at its own limit (the simulated GPU's top, 300 W)
        state = runs.home / fault / "simulated" / f"{gpu}.json"
        assert not state.exists() or json.loads(state.read_text())["power_limit_w"] == 300.0
