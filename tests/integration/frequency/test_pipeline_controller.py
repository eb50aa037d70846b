"""The frequency controller on a real 2-stage 1F1B pipeline (two CPU processes, gloo, simulated GPUs)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import SCRIPTS_DIR
from wattwise.pipeline.schedule import one_f_one_b

SCRIPT = SCRIPTS_DIR / "pipeline_run.py"
MAX_MHZ = 1740


def plan_for(freq_of) -> list[list[list[object]]]:
    """Per stage, the 1F1B order of our own schedule with a frequency per instruction."""
    return [
        [[s.instruction, s.microbatch, freq_of(stage, s.instruction, s.microbatch)] for s in steps]
        for stage, steps in enumerate(one_f_one_b(2, 4))
    ]


def run_pipelines(tmp_path: Path, **plans) -> dict[str, list[dict]]:
    """Follow each plan in turn with the same two processes; per plan, what each rank reports."""
    files = []
    for name, plan in plans.items():
        (tmp_path / name).mkdir()
        files.append(tmp_path / name / "plan.json")
        files[-1].write_text(json.dumps({"plan": plan}))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, files)], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {name: [json.loads((tmp_path / name / f"rank{r}.json").read_text()) for r in range(2)] for name in plans}


def test_pipeline_follows_the_plan_and_saves_energy_against_maximum_frequency(tmp_path):
    # Forwards are shorter than backwards: slow the forwards down, keep the backwards at full clock.
    plan = plan_for(lambda stage, instr, mb: 1215 if instr == "forward" else MAX_MHZ)
    runs = run_pipelines(tmp_path, planned=plan, max=plan_for(lambda *_: MAX_MHZ))
    planned, fastest = runs["planned"], runs["max"]
    for rank, result in enumerate(planned):
        assert result["applied"] == plan[rank] * 3  # the applied sequence equals the plan, every iteration
        freqs = [f for _, _, f in result["applied"]]
        changes = 1 + sum(a != b for a, b in itertools.pairwise(freqs))
        assert result["clock_changes"] == changes  # the clock is locked only when the frequency changes
        assert result["locked_during"] is not None and result["locked_after"] is None  # reset at the end
    assert all(r["clock_changes"] == 1 for r in fastest)
    planned_j = sum(r["energy_j"] for r in planned)
    fastest_j = sum(r["energy_j"] for r in fastest)
    assert planned_j < fastest_j
