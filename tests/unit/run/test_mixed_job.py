"""A mixed job, seen from its rank 0: rank 0 has no device, rank 1 measures a simulated GPU (scripted here).

All of the run's energy is rank 1's, so all of it is simulated: the summary says `"simulated": true` and
which backend, its printed lines and report say SIMULATED, and `wattwise runs list` says "simulated".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.distributed import Collective
from wattwise.record.summary import format_summary
from wattwise.run import Run

RANK1_GPU = {"key": "gpu1", "backend": "simulated", "index": 1, "name": "Simulated GPU", "simulated": True}


class SimulatedRankOne(Collective):
    """Rank 0 of two; rank 1 found a simulated GPU and measures 50 J in each window."""

    rank, world_size = 0, 2

    def all_gather(self, obj: Any) -> list[Any]:
        if isinstance(obj, tuple) and isinstance(obj[1], bool):  # agree_opening: (reason, simulated)
            return [obj, (None, True)]
        if isinstance(obj, tuple):
            return [obj, (None, obj[1])]
        if isinstance(obj, dict) and "energy" in obj:  # the figures exchanged at the end
            other = dict(obj, rank=1, energy={"rank1/gpu1": 50.0}, uncertainty={"rank1/gpu1": 0.5})
            return [obj, dict(other, devices=[dict(RANK1_GPU, rank=1)], lost=None)]
        return [obj, None if obj is None or isinstance(obj, str) else obj]

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(float(t), float(e) + 50.0) for t, e in windows]


def test_a_job_whose_only_energy_is_simulated_is_marked_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    out = tmp_path / "run"
    cfg = load_config(overrides=[f"output_dir={out}", "monitor.sample_power=false", "monitor.sync_cuda=false"])
    run = Run(cfg, devices=[], collective=SimulatedRankOne())
    run.start()
    for _ in range(3):
        run.step_begin()
        run.step_end()
    record = run.finish()
    assert record is not None
    s = json.loads((out / "summary.json").read_text())
    assert s["simulated"] is True and s["backend"] == "simulated"
    assert list(s["energy_per_device_j"]) == ["rank1/gpu1"]
    assert "SIMULATED GPU" in format_summary(record)
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "**Simulated.**" in capsys.readouterr().out
    assert main(["runs", "list"]) == 0
    [row] = capsys.readouterr().out.splitlines()[1:]  # a header, then the one run
    assert "simulated" in row and "measured" not in row
