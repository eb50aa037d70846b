"""Fixtures for the Accelerate adapter's unit tests: Accelerate's state reset around each test, and the clock."""

from __future__ import annotations

import pytest

from tests.support.accelerate_fixtures import fresh_accelerate
from tests.support.clock import VirtualClock

__all__ = ["clock", "fresh_accelerate"]


@pytest.fixture
def clock(virtual_clock: VirtualClock) -> VirtualClock:
    """The root conftest's virtual clock, under the name these tests give it."""
    return virtual_clock
