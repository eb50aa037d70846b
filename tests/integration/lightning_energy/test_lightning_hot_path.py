"""EnergyCallback on Lightning's own `BoringModel`: what a step is, what a step costs, and the life cycle
(validation, short runs, resumes, repeated fits, reuse, checkpoints) as the callback's docstring states it.

Each training batch keeps a simulated GPU busy for its modelled step time on a virtual clock, so every
figure is exact: a step at limit W takes `BASE_S * time_factor(W)` and uses its busy power meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.network import free_port
from tests.support.paths import SCRIPTS_DIR

BASE_S = 0.01
DDP_SCRIPT = SCRIPTS_DIR / "ddp_hot_path.py"


def read_summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


# -- 9. two processes --------------------------------------------------------------------------------------
def test_two_processes_make_collectives_only_at_logging_points(tmp_path):
    out = tmp_path / "run"
    # Both processes started at once, as torchrun would (LOCAL_RANK set: Lightning launches none itself),
    # so that they import in parallel.
    env = dict(os.environ, PYTHONWARNINGS="ignore", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    procs = [subprocess.Popen([sys.executable, str(DDP_SCRIPT), str(out), "200", "50"],
                              env=dict(env, LOCAL_RANK=str(rank)), cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(e[-3000:] for e in errors)
    summary = read_summary(out)
    assert summary["world_size"] == 2 and summary["steps"] == 200
    for rank in (0, 1):
        counts = json.loads((out / f"collectives-rank{rank}.json").read_text())
        assert counts["steps"] == 200
        # One combine per logging point, plus a few at the start, the epoch's end and the finish.
        assert 0 < sum(counts["wattwise"].values()) <= 200 // 50 + 10, counts
        assert 0 < counts["syncs"] <= 200 // 50 + 10, counts


