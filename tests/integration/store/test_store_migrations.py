"""The store's schema by Alembic, on SQLite and on a real PostgreSQL server: an empty database and a
store made by wattwise 0.1.0 both reach the newest revision without losing a row, and a store from a
newer wattwise is refused. (Concurrent first opens: the 8-process tests of test_recurring_store.py.)

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
from wattwise.recurring.spec import JobSpec
from wattwise.store.migrations import VERSION_TABLE, head_revision
from wattwise.store.schema import metadata
from wattwise.store.sql import SqlJobStore

DATA = DATA_DIR
#: wattwise 0.1.0's tables, and the column that orders each one's rows.
TABLES_V1 = {
    "wattwise_jobs": "name",
    "wattwise_runs": "id",
    "wattwise_power_limits": "job_name, batch_size",
    "wattwise_schema_version": "version",
}
SPEC = JobSpec(
    name="shared/job",
    batch_sizes=(16, 32, 64, 128),
    default_batch_size=64,
    target_metric=0.8,
    max_epochs=5,
    max_power_w=300.0,
)


def _load_v1_store(url: str) -> None:
    """Restore the dump of a store made by wattwise 0.1.0 into the empty database at `url`."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            conn.executescript((DATA / "store_v1.sqlite.sql").read_text())
        conn.close()
        return
    engine = create_engine(url)
    with engine.connect() as conn:
        # Several statements with no parameters: psycopg sends them as one simple query.
        conn.connection.driver_connection.execute((DATA / "store_v1.postgresql.sql").read_text())  # type: ignore[union-attr]
        conn.connection.driver_connection.commit()  # type: ignore[union-attr]
    engine.dispose()


def _rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of 0.1.0's tables, read without opening (so without upgrading) the store."""
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = {
            table: [tuple(row) for row in conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {order}")]
            for table, order in TABLES_V1.items()
        }
    engine.dispose()
    return rows


def _schema_differences(url: str) -> list[Any]:
    """What Alembic's autogenerate finds between the database and `wattwise.store.schema`."""
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}), metadata)
    engine.dispose()
    return diff


def _revisions(url: str) -> tuple[str, int]:
    """(Alembic's revision, 0.1.0's schema version) of the store."""
    store = SqlJobStore(url)
    with store.connection() as conn:
        revision = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalar_one()
        legacy = conn.exec_driver_sql("SELECT version FROM wattwise_schema_version").scalar_one()
    store.close()
    return revision, legacy


def _check_migrations_build_the_current_schema(url: str) -> None:
    store = SqlJobStore(url)
    with store.connection() as conn:
        inspector = inspect(conn)
        tables = {t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()}
    store.close()
    expected = {table.name: {c.name for c in table.columns} for table in metadata.sorted_tables}
    assert {name: cols for name, cols in tables.items() if name != VERSION_TABLE} == expected
    assert _schema_differences(url) == []
    # Opening again migrates nothing and keeps the data.
    store = SqlJobStore(url)
    store.register_job(SPEC, 1.0)
    store.close()
    store = SqlJobStore(url)
    assert store.get_job(SPEC.name) == SPEC
    store.close()
    # wattwise 0.1.0 reads its own version table: 1, so it still opens a store that only grew since.
    assert _revisions(url) == (head_revision(), 1)


def test_postgresql_migrations_build_the_current_schema(fresh_postgres: str) -> None:
    _check_migrations_build_the_current_schema(fresh_postgres)


def _check_a_v1_store_is_upgraded_without_losing_a_row(url: str) -> None:
    _load_v1_store(url)
    before = _rows(url)
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

    after = _rows(url)
    assert after["wattwise_runs"][-1][0] == 12
    after["wattwise_runs"].pop()
    assert after == before
    assert _schema_differences(url) == []
    assert _revisions(url) == (head_revision(), 1)


def test_postgresql_store_of_wattwise_0_1_is_upgraded_without_losing_a_row(fresh_postgres: str) -> None:
    _check_a_v1_store_is_upgraded_without_losing_a_row(fresh_postgres)


