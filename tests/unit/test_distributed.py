"""The exchanges' works are held past the next few exchanges and let go of at exit only after the worker's grace."""

from __future__ import annotations

import pytest

from wattwise import distributed


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.monotonic() of the module, advanced by its time.sleep(); [now]."""
    now = [100.0]
    monkeypatch.setattr(distributed.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(distributed.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(distributed, "_HELD", distributed.deque(maxlen=4))
    monkeypatch.setattr(distributed, "_last_exchange_s", None)
    monkeypatch.setattr(distributed.atexit, "register", lambda f: None)
    return now


def test_an_exchange_right_after_another_keeps_the_earlier_ones_works(clock: list[float]) -> None:
    first, second = object(), object()
    distributed._hold(first)
    distributed._hold(second)
    assert [held for exchange in distributed._HELD for held in exchange] == [first, second]
    for _ in range(4):
        distributed._hold(object())
    assert first not in [held for exchange in distributed._HELD for held in exchange]  # a bounded few


def test_at_exit_the_works_are_let_go_of_only_after_the_workers_grace(clock: list[float]) -> None:
    distributed._hold(object())
    clock[0] += 0.05  # the process ends 50 ms after its last exchange
    distributed._let_go()
    assert clock[0] == pytest.approx(100.0 + distributed.WORKER_GRACE_S)
    assert not distributed._HELD


def test_at_exit_long_after_the_last_exchange_nothing_waits(clock: list[float]) -> None:
    distributed._hold(object())
    clock[0] += 10.0
    distributed._let_go()
    assert clock[0] == pytest.approx(110.0)
    assert not distributed._HELD
