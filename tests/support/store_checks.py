"""Checks that every database under the job store passes: the unit tier runs them on SQLite, the integration
tier on the session's PostgreSQL server.

Schema migrations (an empty database and a store made by wattwise 0.1.0 reach the newest revision without
losing a row), and remembered power limits (what a tuning run saves comes back with who chose it and how).
The 0.1.0 stores are `tests/data/store_v1.*.sql`, dumps of stores that 0.1.0's own code filled.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from tests.support.paths import DATA_DIR
from tests.support.stores import SHARED_JOB
from wattwise.profile import ProfileEntry
from wattwise.store.limits_memory import LimitsMemory, RememberedLimit, memory_key
from wattwise.store.migrations import VERSION_TABLE, head_revision
from wattwise.store.schema import metadata
from wattwise.store.sql import SqlJobStore

#: wattwise 0.1.0's tables, and the column that orders each one's rows.
TABLES_V1 = {
    "wattwise_jobs": "name",
    "wattwise_runs": "id",
    "wattwise_power_limits": "job_name, batch_size",
    "wattwise_schema_version": "version",
}
#: A tuning run's profile (limit in W, step time in s, energy in J), as remembered with its choice.
PROFILE = [ProfileEntry(300.0, 0.5, 150.0), ProfileEntry(250.0, 0.52, 130.0), ProfileEntry(200.0, 0.6, 120.0)]
#: What a limit is remembered under: the job, the GPU model, the GPU count and the batch size.
KEY = memory_key("bert/squad", "NVIDIA A40", 4, 32)


def load_v1_store(url: str) -> None:
    """Restore the dump of a store made by wattwise 0.1.0 into the empty database at `url`."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as database:
            database.executescript((DATA_DIR / "store_v1.sqlite.sql").read_text())
        database.close()
        return
    engine = create_engine(url)
    with engine.connect() as conn:
        # Several statements with no parameters: psycopg sends them as one simple query.
        conn.connection.driver_connection.execute((DATA_DIR / "store_v1.postgresql.sql").read_text())  # type: ignore[union-attr]
        conn.connection.driver_connection.commit()  # type: ignore[union-attr]
    engine.dispose()


def rows_v1(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of 0.1.0's tables, read without opening (so without upgrading) the store."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = {
            table: [tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {order}")]
            for table, order in TABLES_V1.items()
        }
    engine.dispose()
    return rows


def schema_differences(url: str) -> list[Any]:
    """What Alembic's autogenerate finds between the database and `wattwise.store.schema`."""
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}), metadata)
    engine.dispose()
    return diff


def revisions(url: str) -> tuple[str, int]:
    """(Alembic's revision, 0.1.0's schema version) of the store."""
    store = SqlJobStore(url)
    with store.connection() as conn:
        revision = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar_one()
        legacy = conn.exec_driver_sql("SELECT version FROM wattwise_schema_version").scalar_one()
    store.close()
    return revision, legacy


def check_migrations_build_the_current_schema(url: str) -> None:
    """An empty database opened as a store has exactly the current tables, and opening again changes nothing."""
    store = SqlJobStore(url)
    with store.connection() as conn:
        inspector = inspect(conn)
        tables = {t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()}
    store.close()
    expected = {table.name: {c.name for c in table.columns} for table in metadata.sorted_tables}
    assert {name: cols for name, cols in tables.items() if name != VERSION_TABLE} == expected
    assert schema_differences(url) == []
    # Opening again migrates nothing and keeps the data.
    store = SqlJobStore(url)
    store.register_job(SHARED_JOB, 1.0)
    store.close()
    store = SqlJobStore(url)
    assert store.get_job(SHARED_JOB.name) == SHARED_JOB
    store.close()
    # wattwise 0.1.0 reads its own version table: 1, so it still opens a store that only grew since.
    assert revisions(url) == (head_revision(), 1)


def check_a_v1_store_is_upgraded_without_losing_a_row(url: str) -> None:
    """A store of wattwise 0.1.0, opened, reaches the newest revision with every row and goes on numbering runs."""
    load_v1_store(url)
    before = rows_v1(url)
    assert [len(before[t]) for t in TABLES_V1] == [2, 10, 5, 1]

    store = SqlJobStore(url)
    assert [spec.name for spec in store.list_jobs()] == ["bert/squad", "team.a/resnet50@v2"]
    bert = store.runs("bert/squad")
    assert [(r.run_id, r.batch_size, r.state) for r in bert] == [
        (2, 32, "reached"),
        (3, 16, "reached"),
        (4, 64, "failed"),
        (5, 16, "reached"),
        (6, 16, "open"),
    ]
    assert math.isinf(bert[0].cost_limit) and bert[1].cost_limit == 1112250.0
    assert store.power_limits("team.a/resnet50@v2") == {128: 275.5, 256: 275.5}
    assert store.least_reached_cost("bert/squad") == 417093.75
    # New runs get new ids after the old ones (the PostgreSQL sequence came through the upgrade).
    run = store.start_run("bert/squad", lambda runs, limits: (32, "exploit", math.inf), 1.8e9)
    assert run.run_id == 12 and run.power_limit_w == 200.0
    store.close()

    after = rows_v1(url)
    assert after["wattwise_runs"][-1][0] == 12
    after["wattwise_runs"].pop()
    assert after == before
    assert schema_differences(url) == []
    assert revisions(url) == (head_revision(), 1)


def check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(location: str) -> None:
    """Remembered limits in the store at `location`: saved, recalled with their choice, replaced, forgotten."""
    memory = LimitsMemory(location)
    assert memory.load(KEY) is None and memory.recall(KEY) is None
    memory.save(KEY, PROFILE[1], PROFILE, selector="cost", eta=0.5, run_id="run-7", chosen_at_s=1000.0)
    assert memory.load(KEY) == (PROFILE[1], PROFILE)
    assert LimitsMemory(location).recall(KEY) == RememberedLimit(PROFILE[1], PROFILE, "cost", 0.5, 1000.0, "run-7")
    # A later tuning of the same key replaces it; other keys are apart.
    memory.save(KEY, PROFILE[2], PROFILE[1:], selector="energy", eta=1.0, chosen_at_s=2000.0)
    memory.save(memory_key("bert/squad", "NVIDIA A40", 4, 64), PROFILE[0], PROFILE)
    assert memory.recall(KEY) == RememberedLimit(PROFILE[2], PROFILE[1:], "energy", 1.0, 2000.0, None)
    assert memory.forget(KEY) is True and memory.forget(KEY) is False
    assert memory.load(KEY) is None
    assert memory.load(memory_key("bert/squad", "NVIDIA A40", 4, 64)) == (PROFILE[0], PROFILE)
