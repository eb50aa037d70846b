"""`wattwise run`'s last line: where the summary went and what it says, marked when the GPU is simulated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wattwise.cli.run import _tell_summary
from wattwise.config import load_config


def last_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], **summary: Any) -> str:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"status": "completed", "steps": 200, "energy_j": 112.64, **summary}))
    _tell_summary(path, None, load_config())
    return capsys.readouterr().err.strip()


def test_an_undriven_simulated_gpu_is_named_as_idle_power(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = last_line(tmp_path, capsys, simulated=True, simulated_driven_by="nothing", energy_uncertainty_j=1.4)
    assert line == (
        f"wattwise run: summary: {tmp_path / 'summary.json'} (simulated, idle power only (nothing drove the "
        "simulated GPU); completed, 200 steps, 112.6 ± 1.4 J)"
    )


def test_a_gpu_driven_by_the_steps_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = last_line(tmp_path, capsys, simulated=True, simulated_driven_by="steps", energy_uncertainty_j=0.0)
    assert line.endswith("(simulated, driven by your steps; completed, 200 steps, 112.6 J)")


def test_hardware_figures_carry_no_mark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = last_line(tmp_path, capsys, simulated=False, energy_uncertainty_j=27.0)
    assert line.endswith("(completed, 200 steps, 113 ± 27 J)")
