"""A run history of many runs, written in one statement (a store of 20,000 runs in about a second), optionally
with one row that does not read as a run: what the dashboard's browser test and
`benchmarks/dashboard_many_runs.py` serve.

The rows hold the columns `put_run` writes (`_values`, the writer's login as owner), inserted together: a new
store has no row to replace or owner to check, and 20,000 `put_run` calls took 19 CPU-s.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from sqlalchemy import insert

from tests.support.run_history import T0_S, make_row
from wattwise.store.history import _values, current_owner
from wattwise.store.runs import new_run_id
from wattwise.store.schema import run_history_table
from wattwise.store.sql import SqlJobStore

#: The id of the row `write_many_runs(..., hostile=True)` damages.
HOSTILE_ID = "20261130T000000Z-badbad"


def write_many_runs(location: Path, count: int, *, hostile: bool = False) -> list[str]:
    """`count` runs a minute apart in the SQLite store at `location` (and one unreadable row): their ids."""
    rows = [make_row(new_run_id(T0_S + 60.0 * i), start_s=T0_S + 60.0 * i, energy_j=30_000.0 + i) for i in range(count)]
    if hostile:
        rows.append(make_row(HOSTILE_ID, start_s=T0_S - 86_400.0))
    store = SqlJobStore(f"sqlite:///{location}")
    try:
        store.write(
            lambda conn: conn.execute(
                insert(run_history_table),
                [_values(dataclasses.replace(row, owner=current_owner(conn))) for row in rows],
            )
        )
    finally:
        store.close()
    if hostile:
        with sqlite3.connect(location) as db:
            db.execute("UPDATE wattwise_run_history SET devices = '{not json' WHERE id = ?", (HOSTILE_ID,))
    return [row.id for row in rows if row.id != HOSTILE_ID]
