"""`wattwise demo --backend agent`: one GPU of the agent's, and one line when a run measured nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wattwise.config import load_config
from wattwise.errors import Unavailable
from wattwise.tools.demo import DemoOptions, _summary_of, demo_overrides


def test_the_agent_demo_leases_one_gpu_whatever_cuda_visible_devices_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    overrides = demo_overrides(DemoOptions(backend="agent", output_dir=str(tmp_path)), None)
    assert load_config(overrides=overrides).devices.gpus == [0]
    assert load_config(overrides=demo_overrides(DemoOptions(output_dir=str(tmp_path)), None)).devices.gpus is None


def test_a_baseline_run_that_measured_nothing_is_one_line_naming_the_tuned_runs_folder(tmp_path: Path) -> None:
    options = DemoOptions(backend="agent", output_dir=str(tmp_path))
    seen: list[list[str]] = []

    def train(overrides: list[str], steps: int, stop: object = None) -> dict[str, Any]:
        seen.append(overrides)
        raise RuntimeError("the energy callback produced no summary; see the warnings above")

    with pytest.raises(Unavailable) as err:
        _summary_of(options, "baseline", train, ["power_limit.mode=measure"], 10)
    message = str(err.value)
    assert message.startswith("demo: the baseline run measured nothing: the energy callback produced no summary")
    assert "node agent" in message and message.endswith(f"the tuned run's summary is in {tmp_path}")
    assert seen == [["power_limit.mode=measure", f"output_dir={tmp_path / 'baseline'}"]]
