"""The run history's checks, run on SQLite in the unit tier and on PostgreSQL in the integration tier.

`make_row` builds a run as a finished run records it; `check_the_history_records_lists_and_forgets_runs`
is what `wattwise runs` relies on from any store.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from wattwise.errors import UsageError
from wattwise.store.history import RunPayback
from wattwise.store.runs import RunRow, forget_run, get_run, get_runs, iso_utc, list_runs, record_run

#: 2026-12-01T10:00:00Z, the first test run's start.
T0_S = 1_796_119_200.0


def make_row(run_id: str, *, start_s: float = T0_S, **fields: Any) -> RunRow:
    """A tuned run of `bert/squad` on one simulated GPU that started at `start_s`, with `fields` changed."""
    row = RunRow(
        id=run_id,
        job="bert/squad",
        framework="lightning",
        mode="tune",
        status="completed",
        start_time=iso_utc(start_s),
        end_time=iso_utc(start_s + 120.0),
        devices=("NVIDIA A40 (simulated)",),
        time_s=120.0,
        energy_j=30_000.0,
        energy_uncertainty_j=150.0,
        power_limit_w=200.0,
        saving_j=4_500.0,
        time_cost_s=9.5,
        folder=f"/runs/{run_id}",
        simulated=True,
    )
    return dataclasses.replace(row, **fields)


def check_the_history_records_lists_and_forgets_runs(url: str) -> None:
    """Three runs recorded in the store at `url` come back whole, filtered, by prefix, and one is forgotten."""
    payback = RunPayback(
        run_energy_saved_j=-12.5, run_energy_saved_uncertainty_j=40.0, run_time_added_s=3.2, break_even_steps=None,
        paid_back=False,
    )  # fmt: skip
    first = make_row("20261201T100000Z-aaaaaa", payback=payback)  # its one saving, kept in the payback columns
    second = make_row("20261201T110000Z-bbbbbb", start_s=T0_S + 3600, status="interrupted", saving_j=None)
    other = make_row(
        "20261201T120000Z-cccccc", start_s=T0_S + 7200, job=None, mode="measure", power_limit_w=None, time_cost_s=None
    )
    for row in (other, second, first):
        assert record_run(row, location=url) is None  # stored, not spooled
    assert record_run(first, location=url) is None  # a run recorded twice keeps one row
    owner = list_runs(location=url)[0].owner  # the store names who recorded each run
    assert owner
    first, second, other = (dataclasses.replace(row, owner=owner) for row in (first, second, other))
    assert list_runs(location=url) == [first, second, other]
    assert list_runs(job="bert/squad", location=url) == [first, second]
    assert list_runs(status="interrupted", location=url) == [second]
    assert list_runs(since=T0_S + 3600, location=url) == [second, other]
    assert get_run("20261201T11", location=url) == second
    assert get_runs(["20261201T12", first.id], location=url) == [other, first]
    with pytest.raises(UsageError, match="ambiguous: it starts 20261201T100000Z-aaaaaa, 20261201T110000Z-bbbbbb"):
        get_run("20261201T1", location=url)
    assert forget_run(second.id, location=url) == second
    assert list_runs(location=url) == [first, other]
    with pytest.raises(UsageError, match=r"no run '20261201T110000Z-bbbbbb' in the store \(see `wattwise runs list`\)"):
        get_run(second.id, location=url)
