"""Fixtures for the device tests here."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def discovery_as_a_user_runs_it(simulated_home: Path, real_auto_backend: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Device discovery as in a user's plain shell: backend "auto", every GPU visible, a fresh state dir."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
