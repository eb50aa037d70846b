"""Preemption (issue 27): SIGTERM in the middle of a Lightning fit that wattwise tunes through the flag, and
in every process of a tuned DDP fit.

Lightning handles SIGTERM itself: its handler notes the signal and the fit raises `SIGTERMException` at the
next batch, so that callbacks can checkpoint, and the script exits 0. wattwise restores the GPU's settings
at the signal and lets that handling go on: the same exit code and the same user callback as without it,
and a summary that says the run was interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import SCRIPTS_DIR
from wattwise.record.files import read_run_dir

SCRIPT = SCRIPTS_DIR / "preempted_lightning.py"
#: Tuning's first window (300 W, the simulated GPU's top limit) is still open at step 6, when SIGTERM comes.
TUNE = "devices.backend=simulated power_limit.wait_steps=0 power_limit.warmup_steps=1 power_limit.profile_steps=20"


def preempted(tmp: Path, name: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The script, preempted at step 6, with only `env`'s flags; its marker folder."""
    marker = tmp / name
    marker.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE", "LIGHTNING_ENERGY"))}
    clean.update(PYTHONWARNINGS="ignore", WATTWISE_HOME=str(tmp / "home"), **env)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(marker)], env=clean, cwd=tmp, capture_output=True, text=True, timeout=120
    )
    return proc, marker


def test_sigterm_in_a_tuned_fit_lets_lightning_handle_it_and_restores_the_limit(tmp_path):
    without, marker = preempted(tmp_path, "without")
    assert without.returncode == 0, without.stderr[-2000:]
    assert (marker / "on_exception").read_text() == "SIGTERMException"

    state = tmp_path / "home" / "simulated" / "gpu0.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"power_limit_w": 250.0, "locked_sm_clocks_mhz": None}))  # the GPU's own limit
    out = tmp_path / "out"
    tuned, marker = preempted(
        tmp_path,
        "tuned",
        LIGHTNING_ENERGY="1",
        LIGHTNING_ENERGY_MODE="tune",
        LIGHTNING_ENERGY_OUTPUT_DIR=str(out),
        LIGHTNING_ENERGY_OVERRIDES=TUNE,
    )
    # As without wattwise: Lightning's own handling ran the user's callback, and the script ended normally.
    assert tuned.returncode == 0, tuned.stderr[-2000:]
    assert (marker / "on_exception").read_text() == "SIGTERMException"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["steps"] == 6
    assert [e["value"] for e in summary["settings_timeline"]] == [300.0]  # tuning had set 300 W ...
    assert json.loads(state.read_text())["power_limit_w"] == 250.0  # ... and the GPU's own limit is back


def wait_for_group_end(pgid: int, timeout_s: float = 60.0) -> None:
    """Wait until no process of the group `pgid` runs: rank 1, the launcher's child, may outlive rank 0."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process group {pgid} still runs {timeout_s:g} s after its leader ended")


def test_sigterm_to_every_process_of_a_ddp_fit_restores_each_gpu_and_says_where_each_rank_s_figures_are(tmp_path):
    # As SLURM's scancel: one SIGTERM to every process of the job at once. Lightning's own handling under DDP:
    # rank 0 raises SIGTERMException, rank 1 fails in the collective it makes (the peer left), and the script
    # exits 0. wattwise used to hang there, meeting the other process in on_exception to combine figures; now
    # each process ends on its own. Rank 1, inside a gloo collective that waits for rank 0, runs its handlers
    # only once that fails, when rank 0 has ended: its figures come after the summary, and it adds a note
    # saying where they are (in the output folder and in the run's own folder), not "left no figures" alone.
    # When the signal finds rank 1 between collectives instead, its figures are in the summary's totals.
    home = tmp_path / "home"
    states = [home / "sigterm-group" / "simulated" / f"gpu{i}.json" for i in range(2)]
    states[0].parent.mkdir(parents=True)
    for state in states:
        state.write_text(json.dumps({"power_limit_w": 250.0, "locked_sm_clocks_mhz": None}))  # their own limit
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE", "LIGHTNING_ENERGY"))}
    env.update(WATTWISE_HOME=str(home))
    with subprocess.Popen(
        [sys.executable, str(SCRIPTS_DIR / "ranks_differ.py"), str(home), str(tmp_path / "run"), "sigterm-group"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the group signalled is the script's own
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # every process of the job, as subprocess.run's timeout would
            raise
    assert proc.returncode == 0, stderr[-3000:]  # as without wattwise
    # Rank 1 ends after rank 0 (its handlers run once its collective fails), and may still be writing its
    # figures when the script's own process has ended: read the run once every process of the job is gone.
    wait_for_group_end(proc.pid)
    assert [json.loads(s.read_text())["power_limit_w"] for s in states] == [250.0, 250.0]  # restored in each
    run = tmp_path / "run" / "sigterm-group"
    for folder in (run, run / "latest"):
        summary = json.loads((folder / "summary.json").read_text())
        assert (summary["status"], summary["steps"], summary["world_size"]) == ("interrupted", 6, 2)
        notes = read_run_dir(folder).summary.notes  # as the reader shows them: a late rank's own note merged
        assert any(n.startswith("SIGTERM reached rank 0") for n in notes)
        late = [n for n in notes if n.startswith("rank 1 left its figures after this summary was written")]
        if "rank1/gpu1" in summary["energy_per_device_j"]:
            # Rank 1 was between collectives when the signal came: its figures came within the main process's
            # wait and are in the totals, with nothing said missing or late.
            assert not late and not [n for n in notes if "left no figures" in n], notes
            continue
        assert len(late) == 1, notes
        assert not [n for n in notes if "rank 1 left no figures" in n], notes  # late, not missing
        assert "interrupted-rank1.json" in late[0] and "not in these totals" in late[0]
        figures = json.loads((folder / "interrupted-rank1.json").read_text())
        assert figures["rank"] == 1 and sum(figures["energy"].values()) > 0
