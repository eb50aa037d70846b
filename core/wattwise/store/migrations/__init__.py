"""Schema migrations of the store, by Alembic, applied by the store itself each time it is opened.

`upgrade` brings a database to the newest revision inside the caller's write transaction, under a lock
that serialises processes opening the same store at once (SQLite: the transaction itself, begun
IMMEDIATE; PostgreSQL: a transaction-level advisory lock), so a new store is created exactly once and a
half-done upgrade rolls back (DDL is transactional in both). Alembic's version table is
`wattwise_alembic_version`, so a PostgreSQL database that also holds an application's own Alembic
history keeps both apart.

Revision 0001 is the schema of wattwise 0.1.0, which tracked its version in `wattwise_schema_version`
without Alembic: such a store is stamped at 0001 (its tables are already there) and upgraded from
there, keeping every row. A store at a revision this wattwise does not know was written by a newer one
and is refused.

Users never run `alembic`; a developer adds a revision with the command in `alembic.ini`, and the test
that compares an upgraded empty database with `wattwise.store.schema` tells whether it is complete.

A store already at the newest revision (every open but the first) is told apart with one query of the
version table, and Alembic is imported only to upgrade: a `wattwise runs list` or `jobs show` does not pay
for loading it and its revision scripts. `HEAD_REVISION` names the newest revision; a unit test holds that
it is Alembic's head.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, String, column, func, select, table, text

from wattwise.errors import UsageError
from wattwise.store.schema import legacy_version_table

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

VERSION_TABLE = "wattwise_alembic_version"
#: The newest revision of versions/ (kept equal to Alembic's head by a test).
HEAD_REVISION = "0008"
#: The oldest revision whose run history a reader reads as it is (the columns added since read as unknown).
READABLE_REVISION = "0003"
#: The revision that is wattwise 0.1.0's schema (its `wattwise_schema_version` says 1).
BASELINE_REVISION = "0001"
#: Any 64-bit number unique to this purpose: the PostgreSQL advisory lock that serialises upgrades.
_PG_LOCK_KEY = 0x77617474_77697365 & 0x7FFFFFFFFFFFFFFF


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's settings (`alembic.ini` beside this file); `env.py` runs on `connection`."""
    from alembic.config import Config

    config = Config(str(Path(__file__).with_name("alembic.ini")))
    config.attributes["connection"] = connection
    return config


@functools.cache
def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The newest revision this wattwise knows, as Alembic finds it among the revision scripts."""
    head = _script().get_current_head()
    assert head is not None, "no Alembic revision found beside wattwise.store.migrations"
    return head


def current_revision(conn: Connection) -> str | None:
    """The revision the database is at (None: no Alembic history, an empty or a 0.1.0 store)."""
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return None
    query = select(column("version_num", String)).select_from(table(VERSION_TABLE))
    found: list[str] = list(conn.execute(query).scalars().all())
    if len(found) > 1:  # several heads: only Alembic can say (never written by wattwise's linear history)
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    return found[0] if found else None


def _legacy_version(conn: Connection) -> int | None:
    """The schema version wattwise 0.1.0 wrote, when its version table is there."""
    if not conn.dialect.has_table(conn, legacy_version_table.name):
        return None
    return conn.execute(select(func.max(legacy_version_table.c.version))).scalar()


def _newer(found: str) -> UsageError:
    return UsageError(
        f"the job store is at {found}, newer than this wattwise knows (revision {head_revision()}); "
        f"upgrade wattwise, or point --store / WATTWISE_STORE at another store"
    )


def check_readable(conn: Connection, *, store: str) -> str | None:
    """What a reader needs of a store it must not change: the newest revision, or nothing at all.

    Returns:
        The revision, or None for a database with no table at all (an empty file: no runs yet).

    Raises:
        UsageError: the store is at an older revision (saying how to upgrade it: a reader never does), or
            was written by a newer wattwise.
    """
    current = current_revision(conn)
    if current == HEAD_REVISION or (current in _KNOWN_REVISIONS and current >= READABLE_REVISION):
        return current
    if current is None and not conn.dialect.get_table_names(conn):
        return None
    if current is None:
        legacy = _legacy_version(conn)
        if legacy is not None and legacy != 1:
            raise _newer(f"schema version {legacy}")
        if legacy is None:
            raise UsageError(
                f"the store {store} holds tables but none of wattwise's; give the path of a wattwise store "
                "(a SQLite file) or a database URL"
            )
    elif current not in _KNOWN_REVISIONS and _unknown(current):
        raise _newer(f"revision {current}")
    found = "wattwise 0.1.0's schema" if current is None else f"revision {current}"
    raise UsageError(
        f"the store {store} is at {found}, older than this wattwise reads (revision {HEAD_REVISION}); "
        "readers never change a store: upgrade it once with a command that writes to it, "
        f"`wattwise jobs list --store {store}`"
    )


def _unknown(revision: str) -> bool:
    from alembic.util import CommandError

    try:
        _script().get_revision(revision)
    except CommandError:
        return True
    return False


#: Revisions known without loading Alembic (every one up to the head is a plain number).
_KNOWN_REVISIONS = frozenset(f"{n:04d}" for n in range(1, int(HEAD_REVISION) + 1))


def upgrade(conn: Connection) -> str:
    """Bring the store to the newest revision inside the caller's write transaction.

    A 0.1.0 store (no Alembic history, legacy schema version 1) is stamped at the baseline first, so
    its rows are kept. PostgreSQL: a transaction-level advisory lock serialises concurrent upgrades.

    Args:
        conn: A connection inside a write transaction (`SqlJobStore.write`).

    Returns:
        The revision the store is now at (the newest this wattwise knows).

    Raises:
        UsageError: the store was written by a newer wattwise (an unknown revision or legacy version).
    """
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
    current = current_revision(conn)
    if current == HEAD_REVISION:
        return HEAD_REVISION
    from alembic import command
    from alembic.util import CommandError

    head = head_revision()
    config = alembic_config(conn)
    if current is None:
        legacy = _legacy_version(conn)
        if legacy is not None and legacy != 1:
            raise _newer(f"schema version {legacy}")
        if legacy == 1:
            command.stamp(config, BASELINE_REVISION)
    else:
        try:
            _script().get_revision(current)
        except CommandError as err:
            raise _newer(f"revision {current}") from err
    command.upgrade(config, "head")
    return head
