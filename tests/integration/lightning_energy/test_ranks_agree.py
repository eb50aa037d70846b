"""Ranks must agree (issue 27): a DDP fit where one process cannot change its GPU and the other can.

A process that degraded to measurement only on its own while the other tuned issued other collectives: the
run crashed (a collective mismatch, SIGABRT) or hung. Now a failed change only suspends that process's
changes, and every process degrades together at the next point where they already exchange figures. For
each way one rank can differ: training goes on to its last step, exit 0, one warning, the summary names the
rank and what failed there, and every GPU is back at its own limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "ranks_differ.py"

#: Holds the simulated GPU 1 as another wattwise process would (its guard changed the limit), until killed.
HOLDER = """
import sys, time
from wattwise.devices.simulated import SimulatedGPU
from wattwise.settings.guard import SettingsGuard
guard = SettingsGuard()
guard.install_signal_handlers()
guard.set_power_limit(SimulatedGPU(1, state_file=sys.argv[1]), 200.0)
print("held", flush=True)
time.sleep(600)
"""

#: What the summary's note says failed on rank 1, for each fault.
FAILED = {
    "held": "is held by",
    "permission": "insufficient permissions",
    "lost": "fallen off the bus",
    "refused": "refused a power limit",
    "state": "cannot create the journal folder",
}


def assert_warned_once(fault: str, note: str, warned: str, summary: dict) -> None:
    """The one warning says what failed on rank 1: that every process only measures, or, when the GPU was lost
    (its energy unreadable too, a window's end told every process first), that its energy is left out."""
    if fault == "lost":
        [lost] = [n for n in summary["notes"] if n.startswith("rank 1: energy measurement failed (")]
        assert FAILED[fault] in lost and lost in warned
        assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"]
    else:
        assert note in warned


@pytest.mark.parametrize("fault", sorted(FAILED))
def test_one_rank_that_cannot_change_its_gpu_degrades_every_rank_together(tmp_path, fault):
    home = tmp_path / "home"
    (home / "simulated").mkdir(parents=True)
    env = dict(os.environ, WATTWISE_HOME=str(home))
    env.pop("PYTHONWARNINGS", None)
    holder = None
    if fault == "held":
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(home / "simulated" / "gpu1.json")], env=env,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        proc = subprocess.run([sys.executable, str(SCRIPT), str(home), fault, str(tmp_path / "run")], env=env,
                              capture_output=True, text=True, timeout=240, cwd=tmp_path)
    finally:
        if holder is not None:
            holder.terminate()  # its guard restores its own change
            holder.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rank 0 global_step 16" in proc.stdout and "rank 1 global_step 16" in proc.stdout
    warned = [line for line in proc.stderr.splitlines() if "EnergyPluginWarning: wattwise:" in line]
    assert len(warned) == 1, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("completed", 16, 2)
    [note] = [n for n in summary["notes"] if "every process continues with measurement only" in n]
    assert note.startswith("rank 1: ") and FAILED[fault] in note and "rank 0" not in note
    assert warned[0].endswith("(set strict=True to make this an error)")
    assert_warned_once(fault, note, warned[0], summary)
    assert summary["power_limit"] is None  # no process tuned to the end: no choice is reported
    for gpu in ("gpu0", "gpu1"):  # every GPU is back at its own limit (the simulated GPU's top, 300 W)
        state = home / "simulated" / f"{gpu}.json"
        assert not state.exists() or json.loads(state.read_text())["power_limit_w"] == 300.0
