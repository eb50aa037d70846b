"""The unit tier's one rule, enforced: a unit test starts no process.

Whatever starts one (a subprocess, a multiprocessing worker, a fork) fails the test with the fix: move it to
tests/integration/. That keeps `make test-fast` fast and lets it run anywhere without servers.

The unit tier's simulated GPUs follow the ideal physics (`WATTWISE_SIMULATED_PHYSICS=ideal`): its tests
assert exact figures and never sleep, and the realistic physics' reads take real time on a real clock. A
test of the realistic physics passes `physics=Physics.realistic(seed)` with a virtual clock.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, NoReturn

import pytest


def _refuse(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError(
        "a unit test started a process: move the test to tests/integration/ (tests/unit/ holds in-process tests only)"
    )


@pytest.fixture(autouse=True)
def _ideal_simulated_physics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated GPUs made without a physics follow the ideal one (see the module docstring)."""
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "ideal")
    monkeypatch.delenv("WATTWISE_SIMULATED_SEED", raising=False)


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse subprocess, multiprocessing (fork, spawn, forkserver) and os.fork for the test's duration."""
    import _posixsubprocess

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", _refuse)
    monkeypatch.setattr(os, "fork", _refuse)
    if hasattr(os, "posix_spawn"):
        monkeypatch.setattr(os, "posix_spawn", _refuse)
