"""Schema migrations of the job store, applied in order when a store is opened.

A table `wattwise_schema_version` holds the version a store is at; `MIGRATIONS[i]` takes a store from
version i to i + 1. `migrate` applies the missing ones in one write transaction, under a lock that
serialises processes opening the same store at once (SQLite: the transaction itself, begun IMMEDIATE;
PostgreSQL: a transaction-level advisory lock), so a new store is created exactly once and a half-done
migration rolls back (DDL is transactional in both).

Why not Alembic: three tables, migrations that must run by themselves inside an installed package on
every open (no script directory, no `alembic upgrade` step for users), and no need for autogeneration.
A version table and an ordered list of functions do that with no new dependency. Each migration
carries its own frozen table definitions: the current ones live in `wattwise.recurring.sql_store`, and a
test checks that migrating an empty store yields exactly them.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Connection,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    insert,
    select,
    text,
    update,
)

from wattwise.errors import UsageError

VERSION_TABLE = "wattwise_schema_version"
#: Any 64-bit number unique to this purpose: the PostgreSQL advisory lock that serialises migrations.
_PG_LOCK_KEY = 0x77617474_77697365 & 0x7FFFFFFFFFFFFFFF

_version_metadata = MetaData()
_version = Table(VERSION_TABLE, _version_metadata, Column("version", Integer, nullable=False))


def _v1_create_tables(conn: Connection) -> None:
    """Version 1: jobs, their runs, and remembered power limits."""
    metadata = MetaData()
    Table(
        "wattwise_jobs",
        metadata,
        Column("name", String(128), primary_key=True),
        Column("batch_sizes", Text, nullable=False),
        Column("default_batch_size", Integer, nullable=False),
        Column("target_metric", Double, nullable=False),
        Column("metric_mode", String(3), nullable=False),
        Column("max_epochs", Integer, nullable=False),
        Column("max_power_w", Double, nullable=False),
        Column("eta", Double, nullable=False),
        Column("beta", Double, nullable=False),
        Column("created_at_s", Double, nullable=False),
    )
    Table(
        "wattwise_runs",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_name", String(128), ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), nullable=False),
        Column("batch_size", Integer, nullable=False),
        Column("phase", String(16), nullable=False),
        Column("state", String(16), nullable=False),
        Column("power_limit_w", Double, nullable=True),
        Column("cost_limit", Double, nullable=True),
        Column("epochs", Integer, nullable=False),
        Column("energy_j", Double, nullable=True),
        Column("time_s", Double, nullable=True),
        Column("cost", Double, nullable=True),
        Column("started_at_s", Double, nullable=False),
        Column("updated_at_s", Double, nullable=False),
        Index("ix_wattwise_runs_job_name_id", "job_name", "id"),
    )
    Table(
        "wattwise_power_limits",
        metadata,
        Column("job_name", String(128), ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), primary_key=True),
        Column("batch_size", Integer, primary_key=True),
        Column("power_limit_w", Double, nullable=False),
    )
    metadata.create_all(conn)


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_v1_create_tables,)
LATEST_VERSION = len(MIGRATIONS)


def current_version(conn: Connection) -> int:
    """The version the store is at (0 for an empty database)."""
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return 0
    return int(conn.execute(select(func.max(_version.c.version))).scalar() or 0)


def migrate(conn: Connection) -> int:
    """Bring the store to `LATEST_VERSION` inside the caller's write transaction; returns the version.

    UsageError when the store was written by a newer wattwise.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    _version_metadata.create_all(conn, checkfirst=True)
    version = current_version(conn)
    if version > LATEST_VERSION:
        raise UsageError(
            f"the job store is at schema version {version}, newer than this wattwise knows "
            f"({LATEST_VERSION}); upgrade wattwise, or point --store / WATTWISE_STORE at another store"
        )
    if version == LATEST_VERSION:
        return version
    for migration in MIGRATIONS[version:]:
        migration(conn)
    if version == 0:
        conn.execute(insert(_version).values(version=LATEST_VERSION))
    else:
        conn.execute(update(_version).values(version=LATEST_VERSION))
    return LATEST_VERSION
