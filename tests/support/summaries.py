"""What a user checks in a run's summary.json, shared by the tests that run the examples and the docs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_summary(path: Path) -> dict[str, Any]:
    """The summary.json at `path`, parsed."""
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def assert_tuned(record: dict[str, Any], steps: int) -> None:
    """A completed simulated run of `steps` steps whose tuning finished and chose a limit it profiled."""
    assert record["status"] == "completed"
    assert record["simulated"] is True
    assert record["steps"] == steps
    tuning = record["power_limit"]["tuning"]
    assert tuning["finished"] is True
    assert record["power_limit"]["chosen_power_limit_w"] in tuning["profiled"]
