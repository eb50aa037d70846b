"""The Accelerate adapter's tests, in both tiers: Accelerate's process-wide state reset around each test,
the plugin as they configure it, a tracker that keeps what is logged, and the run's summary.json.

The fixture `fresh_accelerate` reaches the tests through the conftest.py of tests/unit/accelerate_energy/
and tests/integration/accelerate_energy/.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from accelerate.state import AcceleratorState, GradientState
from accelerate.tracking import GeneralTracker

from accelerate_energy import EnergyPlugin
from tests.support.summaries import read_summary

#: No power sampling thread and no CUDA synchronize: the figures come from the simulated GPU's counters.
QUIET = ["monitor.sample_power=false", "monitor.sync_cuda=false"]
#: A short tuning: one step's wait, then per limit (300 to 100 W in 50 W steps) one warm-up and two profiled.
TUNE = [
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=50",
]
#: Steps the tuner needs with TUNE on the default power model (300, 250, 200, 150, 100 W).
TUNING_STEPS = 1 + 5 * (1 + 2)


def reset_accelerate() -> None:
    """Forget Accelerate's process-wide state, as a new script would start with."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def fresh_accelerate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No `ACCELERATE_ENERGY*` variable from the caller's shell, a state dir at `tmp_path/home`, and
    Accelerate's process-wide state forgotten after the test."""
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    for var in list(os.environ):
        if var.startswith("ACCELERATE_ENERGY"):
            monkeypatch.delenv(var)
    yield
    reset_accelerate()


def plugin(tmp_path: Path, *overrides: str, name: str = "run", **fields: Any) -> EnergyPlugin:
    """An enabled plugin, QUIET plus `overrides`, writing its run to `tmp_path/name`."""
    return EnergyPlugin(enabled=True, output_dir=str(tmp_path / name), overrides=[*QUIET, *overrides], **fields)


def summary(tmp_path: Path, name: str = "run") -> dict[str, Any]:
    """The summary.json of the run written to `tmp_path/name`."""
    return read_summary(tmp_path / name / "summary.json")


class Recorder(GeneralTracker):
    """A tracker that keeps what `accelerator.log` sends it."""

    name = "recorder"
    requires_logging_directory = False

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[tuple[int | None, dict[str, Any]]] = []

    @property
    def tracker(self) -> Recorder:
        return self

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Nothing to keep: the tests check what is logged."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Keep `values` with their step."""
        self.logged.append((step, dict(values)))
