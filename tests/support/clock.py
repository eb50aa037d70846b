"""A virtual clock for tests that time simulated GPUs without sleeping."""

from __future__ import annotations


class VirtualClock:
    """A clock that moves only when something sleeps: simulated GPUs timed by it give exact figures.

    Args:
        start: the clock's first reading, in seconds.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.now_s = start

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        """Move the clock on by `seconds` (never backwards)."""
        self.now_s += max(0.0, seconds)
