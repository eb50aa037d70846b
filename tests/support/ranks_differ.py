"""What the ranks-agree tests share: the faults one rank can have, a process that holds a GPU, and the run's output."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

#: What the summary's note says failed on rank 1, for each fault (tests/scripts/ranks_differ.py makes them).
FAILED = {
    "held": "is held by",
    "permission": "insufficient permissions",
    "lost": "fallen off the bus",
    "refused": "refused a power limit",
    "state": "cannot create the journal folder",
    "nodevice": "nothing to measure (no GPU, and the CPU package's energy counter is not readable)",
    "nobackend": "opening its devices failed (NVML unavailable: NVML Shared Library Not Found",
}


def assert_warned_once(fault: str, note: str, warned: str, summary: dict[str, Any]) -> None:
    """The one warning says what failed on rank 1: that every process only measures, or, when the GPU was lost
    (its energy unreadable too, a window's end told every process first), that its energy is left out."""
    if fault == "lost":
        [lost] = [n for n in summary["notes"] if n.startswith("rank 1: energy measurement failed (")]
        assert FAILED[fault] in lost and lost in warned
        assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"]
    elif fault == "nodevice":  # told at the start, as the processes agree on tuning: one note says both
        assert (
            "wattwise: rank 1: nothing to measure (no GPU, and the CPU package's energy counter is not "
            "readable); the figures are the other processes'; every process continues with measurement only"
        ) in warned
        assert list(summary["energy_per_device_j"]) == ["rank0/gpu0"]
    else:
        assert note in warned


@dataclass(frozen=True)
class Runs:
    """One two-process launch that ran every fault in turn: its state and output folders, and what it printed."""

    home: Path
    out: Path
    proc: subprocess.CompletedProcess[str]

    def stderr_of(self, fault: str) -> list[str]:
        """The stderr lines between rank 0's `--- FAULT` marker and the next one."""
        section: list[str] = []
        current = None
        for line in self.proc.stderr.splitlines():
            if line.startswith("--- "):
                current = line.removeprefix("--- ")
            elif current == fault:
                section.append(line)
        return section

    def warnings_of(self, fault: str) -> list[str]:
        """wattwise's warnings while `fault`'s run ran."""
        return [line for line in self.stderr_of(fault) if "EnergyPluginWarning: wattwise:" in line]


def run_every_fault(cmd: list[str], home: Path, out: Path, env: dict[str, str]) -> Runs:
    """Run `cmd` (one launch running every fault in turn) while another process holds the "held" fault's GPU 1.

    `home` gets a folder of simulated GPUs for each fault's run; `out` is where the command writes each fault's
    output. The launch must exit 0.
    """
    for fault in FAILED:
        (home / fault / "simulated").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(home / "held" / "simulated" / "gpu1.json")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        proc = subprocess.run(cmd, env=env, cwd=home.parent, capture_output=True, text=True, timeout=480)
    finally:
        holder.terminate()  # its guard restores its own change
        holder.wait(timeout=60)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return Runs(home, out, proc)
