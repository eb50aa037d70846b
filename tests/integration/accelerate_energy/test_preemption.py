"""Preemption (issue 27) in a plain Accelerate loop tuned with `ACCELERATE_ENERGY=1`: SIGTERM at step 6.

wattwise restores the GPU at the signal, then the script's own handling goes on: a script with its own
handler runs it and ends its loop as without wattwise (exit 0); a script with none ends by the signal
(exit 143, as without wattwise), after wattwise wrote the summary. Either way the summary says the run was
interrupted and the GPU is back at its own limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "preempted_accelerate.py"
#: Tuning's first window (300 W, the simulated GPU's top limit) is still open at step 6, when SIGTERM comes.
TUNE = "power_limit.wait_steps=0 power_limit.warmup_steps=1 power_limit.profile_steps=20"


def preempted(tmp: Path, name: str, handling: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp / name
    marker.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE")}
    clean.update(HF_HOME=str(tmp / "hf"), WATTWISE_HOME=str(tmp / "home"), **env)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(marker), handling], env=clean, cwd=tmp,
                          capture_output=True, text=True, timeout=120)
    return proc, marker


@pytest.mark.parametrize(("handling", "returncode"), [("own", 0), ("none", -signal.SIGTERM)])
def test_sigterm_goes_on_to_the_scripts_own_handling_and_restores_the_limit(tmp_path, handling, returncode):
    without, marker = preempted(tmp_path, "without", handling)
    assert without.returncode == returncode, without.stderr[-2000:]
    assert (marker / "handler").exists() == (handling == "own")

    state = tmp_path / "home" / "simulated" / "gpu0.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"power_limit_w": 250.0, "locked_sm_clocks_mhz": None}))  # the GPU's own limit
    out = tmp_path / "out"
    tuned, marker = preempted(tmp_path, "tuned", handling, ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_MODE="tune",
                              ACCELERATE_ENERGY_BACKEND="simulated", ACCELERATE_ENERGY_OUTPUT_DIR=str(out),
                              ACCELERATE_ENERGY_OVERRIDES=TUNE)
    assert tuned.returncode == returncode, tuned.stderr[-2000:]  # as without wattwise
    if handling == "own":  # the script's handler ran, and its loop stopped where it stops without wattwise
        assert (marker / "handler").read_text() == "SIGTERM"
        assert "stopped after step 6" in tuned.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("interrupted", 6)
    assert [e["value"] for e in summary["settings_timeline"]] == [300.0]  # tuning had set 300 W ...
    assert json.loads(state.read_text())["power_limit_w"] == 250.0  # ... and the GPU's own limit is back
