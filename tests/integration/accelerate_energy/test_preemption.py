"""Preemption (issue 27) in a plain Accelerate loop tuned with `ACCELERATE_ENERGY=1`: SIGTERM at step 6.

wattwise restores the GPU at the signal, then the script's own handling goes on: a script with its own
handler runs it and ends its loop as without wattwise (exit 0); a script with none ends by the signal
(exit 143, as without wattwise), after wattwise wrote the summary. Either way the summary says the run was
interrupted and the GPU is back at its own limit. Under `accelerate launch` with two processes, each
restores its own GPU and the main one writes the summary, without a collective.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.network import free_port
from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "preempted_accelerate.py"
#: Tuning's first window (300 W, the simulated GPU's top limit) is still open at step 6, when SIGTERM comes.
TUNE = "power_limit.wait_steps=0 power_limit.warmup_steps=1 power_limit.profile_steps=20"


def preempted(
    tmp: Path, name: str, handling: str, *, processes: int = 1, **env: str
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The script, preempted at step 6, with only `env`'s flags (under `accelerate launch` when `processes`
    is more than 1); its marker folder."""
    marker = tmp / name
    marker.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE") and k != "PYTHONWARNINGS"}
    clean.update(HF_HOME=str(tmp / "hf"), WATTWISE_HOME=str(tmp / "home"), **env)
    launch = (
        [
            sys.executable,
            "-m",
            "accelerate.commands.accelerate_cli",
            "launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--main_process_port",
            str(free_port()),
        ]
        if processes > 1
        else [sys.executable]
    )
    proc = subprocess.run(
        [*launch, str(SCRIPT), str(marker), handling], env=clean, cwd=tmp, capture_output=True, text=True, timeout=120
    )
    return proc, marker


def gpus_at_their_own_limit(tmp: Path, count: int) -> list[Path]:
    """The simulated GPUs' state files, each GPU at its own limit of 250 W before the run."""
    states = [tmp / "home" / "simulated" / f"gpu{i}.json" for i in range(count)]
    states[0].parent.mkdir(parents=True)
    for state in states:
        state.write_text(json.dumps({"power_limit_w": 250.0, "locked_sm_clocks_mhz": None}))
    return states


@pytest.mark.parametrize(("handling", "returncode"), [("own", 0), ("none", -signal.SIGTERM)])
def test_sigterm_goes_on_to_the_scripts_own_handling_and_restores_the_limit(tmp_path, handling, returncode):
    without, marker = preempted(tmp_path, "without", handling)
    assert without.returncode == returncode, without.stderr[-2000:]
    assert (marker / "handler").exists() == (handling == "own")

    [state] = gpus_at_their_own_limit(tmp_path, 1)
    out = tmp_path / "out"
    tuned, marker = preempted(
        tmp_path,
        "tuned",
        handling,
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_MODE="tune",
        ACCELERATE_ENERGY_BACKEND="simulated",
        ACCELERATE_ENERGY_OUTPUT_DIR=str(out),
        ACCELERATE_ENERGY_OVERRIDES=TUNE,
    )
    assert tuned.returncode == returncode, tuned.stderr[-2000:]  # as without wattwise
    if handling == "own":  # the script's handler ran, and its loop stopped where it stops without wattwise
        assert (marker / "handler").read_text() == "SIGTERM"
        assert "stopped after step 6" in tuned.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("interrupted", 6)
    assert [e["value"] for e in summary["settings_timeline"]] == [300.0]  # tuning had set 300 W ...
    assert json.loads(state.read_text())["power_limit_w"] == 250.0  # ... and the GPU's own limit is back


def test_sigterm_in_both_processes_of_a_launch_with_no_handler_restores_each_gpu_and_writes_the_summary(tmp_path):
    # What a SLURM or Kubernetes preemption of `accelerate launch` does: SIGTERM reaches every process.
    states = gpus_at_their_own_limit(tmp_path, 2)
    out = tmp_path / "out"
    tuned, _ = preempted(
        tmp_path,
        "tuned",
        "none",
        processes=2,
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_MODE="tune",
        ACCELERATE_ENERGY_BACKEND="simulated",
        ACCELERATE_ENERGY_OUTPUT_DIR=str(out),
        ACCELERATE_ENERGY_OVERRIDES=f"{TUNE} devices.simulated.state_dir={states[0].parent}",
    )
    # As without wattwise: each process ends by the signal, and the launcher reports it.
    assert tuned.returncode == 1 and tuned.stderr.count("exitcode  : -15") == 2, tuned.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("interrupted", 6, 2)
    assert "SIGTERM reached rank 0, rank 1: each restored its GPU settings and ended" in " ".join(summary["notes"])
    assert sorted(summary["energy_per_device_j"]) == ["rank0/gpu0", "rank1/gpu1"]  # both processes' figures
    assert sorted(e["device"] for e in summary["settings_timeline"]) == ["rank0/gpu0", "rank1/gpu1"]  # 300 W ...
    assert [json.loads(s.read_text())["power_limit_w"] for s in states] == [250.0, 250.0]  # ... undone in each
    assert sorted(p.name for p in out.glob("interrupted-rank*")) == []  # the main process took them
