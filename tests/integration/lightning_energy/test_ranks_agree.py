"""Ranks must agree: a DDP fit where one process cannot change its GPU and the other can.

A process that degraded to measurement only on its own while the other tuned issued other collectives: the
run crashed (a collective mismatch, SIGABRT) or hung. Now a failed change only suspends that process's
changes, and every process degrades together at the next point where they already exchange figures. For
each way one rank can differ: training goes on to its last step, exit 0, one warning, the summary names the
rank and what failed there, and every GPU is back at its own limit. The faults' fits run one after the other
in one two-process launch.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support.paths import SCRIPTS_DIR
from tests.support.ranks_differ import FAILED, Runs, assert_warned_once, run_every_fault

SCRIPT = SCRIPTS_DIR / "ranks_differ.py"


@pytest.fixture(scope="module")
def fits(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """One fit per fault, one after the other in the same two DDP processes (a launch costs more than a fit)."""
    folder = tmp_path_factory.mktemp("ranks_differ")
    home = folder / "home"
    env = dict(os.environ, WATTWISE_HOME=str(home))
    env.pop("PYTHONWARNINGS", None)
    cmd = [sys.executable, str(SCRIPT), str(home), str(folder / "run"), *sorted(FAILED)]
    return run_every_fault(cmd, home, folder / "run", env)


@pytest.mark.parametrize("fault", sorted(FAILED))
def test_one_rank_that_cannot_change_its_gpu_degrades_every_rank_together(fits, fault):
    for rank in (0, 1):
        assert f"{fault} rank {rank} global_step 16" in fits.proc.stdout, fits.proc.stdout
    warned = fits.warnings_of(fault)
    assert len(warned) == 1, fits.proc.stderr[-3000:]
    summary = json.loads((fits.out / fault / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["world_size"]) == ("completed", 16, 2)
    [note] = [n for n in summary["notes"] if "every process continues with measurement only" in n]
    assert note.startswith("rank 1: ") and FAILED[fault] in note and "rank 0" not in note
    assert warned[0].endswith("(set strict=True to make this an error)")
    assert_warned_once(fault, note, warned[0], summary)
    pl = summary["power_limit"]  # no process tuned to the end: no choice, and why tuning was abandoned
    assert pl["chosen_power_limit_w"] is None and pl["tuning"]["finished"] is False
    assert pl["tuning"]["reason"].startswith("abandoned: rank 1: ") and FAILED[fault] in pl["tuning"]["reason"]
    for gpu in ("gpu0", "gpu1"):  # every GPU is back at its own limit (the simulated GPU's top, 300 W)
        state = fits.home / fault / "simulated" / f"{gpu}.json"
        assert not state.exists() or json.loads(state.read_text())["power_limit_w"] == 300.0
