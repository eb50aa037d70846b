"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """`../shared/data` beside the checkout, or `$WATTWISE_SHARED_DATA`."""
    env = os.environ.get("WATTWISE_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real measured data (Zeus traces and profiles, Perseus profiles); skips when absent."""
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real measured data not found at {path} (set WATTWISE_SHARED_DATA to its location)")
    return path
