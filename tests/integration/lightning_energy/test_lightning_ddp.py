"""EnergyCallback under DDP: two CPU processes over gloo, each with its own simulated GPU.

One tuned two-process fit (set up once for the module) serves every test here: 200 steps, figures logged
every 50, tuning over the first 10.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import SCRIPTS_DIR

SCRIPT = SCRIPTS_DIR / "ddp_fit.py"
STEPS, LOG_EVERY_N_STEPS = 200, 50
#: ddp_fit.py's tuning: 1 step waited, then 3 limits (300, 200, 100 W) of 1 warm-up and 2 profiled steps each.
TUNING_STEPS = 1 + 3 * (1 + 2)


def fit_uncertainty(path: Path) -> float:
    """How precisely the "fit" window's energy is known, in one rank's window log (J)."""
    with open(path) as fh:
        return next(float(r["energy_uncertainty_j"]) for r in csv.DictReader(fh) if r["window_name"] == "fit")


def fit_window(path: Path) -> tuple[float, float]:
    """(time_s, energy_j) of the "fit" window in one rank's window log."""
    with open(path) as fh:
        for row in csv.DictReader(fh):
            if row["window_name"] == "fit":
                return float(row["time_s"]), float(row["energy_j"])
    raise AssertionError(f"no fit window in {path}")


@pytest.fixture(scope="module")
def tuned_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A tuned DDP fit on two processes: its output folder and the finished process (warnings as a user sees them)."""
    folder = tmp_path_factory.mktemp("ddp")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    cmd = [sys.executable, str(SCRIPT), str(folder / "run"), str(STEPS), str(LOG_EVERY_N_STEPS)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder / "run", proc


def test_two_processes_sum_energy_max_time_and_choose_the_same_limit(tuned_fit):
    out, _ = tuned_fit
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
    # How precisely: each rank's counter at the ends of its fit, the two ranks' in quadrature.
    fit_u = [fit_uncertainty(out / name) for name in ("windows.csv", "windows-rank1.csv")]
    assert summary["energy_uncertainty_j"] == pytest.approx(math.hypot(*fit_u), rel=1e-4, abs=1e-5)
    # Both ranks applied the same limits in the same order: the decision was made on combined figures.
    timeline = summary["settings_timeline"]
    by_rank: dict[str, list[float]] = {}
    for event in timeline:
        by_rank.setdefault(event["device"].split("/")[0], []).append(event["value"])
    assert set(by_rank) == {"rank0", "rank1"} and by_rank["rank0"] == by_rank["rank1"]
    assert summary["power_limit"]["chosen_power_limit_w"] == by_rank["rank0"][-1]


def test_a_ddp_fit_gives_no_lightning_warning_about_wattwises_own_logging(tuned_fit):
    out, proc = tuned_fit
    # Epoch figures are combined over the processes before they are logged: Lightning has nothing to warn of.
    assert "sync_dist" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["world_size"] == 2


def test_two_processes_make_collectives_only_at_logging_points_and_tuning_decisions(tuned_fit):
    out, _ = tuned_fit
    assert json.loads((out / "summary.json").read_text())["steps"] == STEPS
    # Tuning takes the first 1 + 3 * (1 + 2) steps; after it, wattwise exchanges figures and synchronises
    # only at the logging points and at the end of the run: no other step makes a collective.
    allowed = set(range(TUNING_STEPS + 1)) | set(range(0, STEPS + 1, LOG_EVERY_N_STEPS)) | {-1}
    for rank in (0, 1):
        counts = json.loads((out / f"collectives-rank{rank}.json").read_text())
        assert counts["steps"] == STEPS
        assert counts["wattwise"] and counts["syncs"] > 0, counts
        assert set(counts["at_steps"]) <= allowed, counts
        assert set(counts["sync_steps"]) <= allowed, counts
        assert sum(counts["wattwise"].values()) <= 30, counts  # a collective on every step would make 200
