"""EnergyCallback under DDP: two CPU processes over gloo, each with its own simulated GPU."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "ddp_fit.py"


def fit_window(path: Path) -> tuple[float, float]:
    """(time_s, energy_j) of the "fit" window in one rank's window log."""
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if row["window_name"] == "fit":
                return float(row["time_s"]), float(row["energy_j"])
    raise AssertionError(f"no fit window in {path}")


def test_two_processes_sum_energy_max_time_and_choose_the_same_limit(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out)], env=env, capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    per_device = summary["energy_per_device_j"]
    assert set(per_device) == {"rank0/gpu0", "rank1/gpu1"}
    assert all(e > 0 for e in per_device.values())
    assert summary["energy_j"] == pytest.approx(sum(per_device.values()))
    # Each rank logged its own fit window: energy is their sum, time the slower rank's.
    fits = [fit_window(out / name) for name in ("windows.csv", "windows-rank1.csv")]
    assert summary["energy_j"] == pytest.approx(sum(e for _, e in fits), rel=1e-5)
    assert summary["time_s"] == pytest.approx(max(t for t, _ in fits), rel=1e-5)
    # Both ranks applied the same limits in the same order: the decision was made on combined figures.
    timeline = summary["settings_timeline"]
    by_rank: dict[str, list[float]] = {}
    for event in timeline:
        by_rank.setdefault(event["device"].split("/")[0], []).append(event["value"])
    assert set(by_rank) == {"rank0", "rank1"} and by_rank["rank0"] == by_rank["rank1"]
    assert summary["power_limit"]["chosen_power_limit_w"] == by_rank["rank0"][-1]


def test_a_measured_ddp_fit_gives_no_lightning_warning_about_wattwises_own_logging(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "measure"], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Epoch figures are combined over the processes before they are logged: Lightning has nothing to warn of.
    assert "sync_dist" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2
