"""The `wattwise` command's tests, in both tiers: where a command runs, and what the simulated GPU idles at.

The fixture `cli_workdir` reaches the tests through the conftest.py of tests/unit/cli/ and
tests/integration/cli/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.devices import PowerModel

#: What the built-in simulated GPU draws when idle, in W: the energy a measured command is charged for.
IDLE_W = PowerModel.default().idle_power_w


@pytest.fixture
def cli_workdir(simulated_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A command run as a user runs it: in a folder of its own (`tmp_path`), with a fresh state dir."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
