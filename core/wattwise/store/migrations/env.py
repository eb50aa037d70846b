"""Alembic's environment script: the store's upgrade runs here on the store's own connection.

`wattwise.store.migrations.upgrade` passes that connection (inside its write transaction, under its
lock) through the config's attributes, so Alembic begins and commits nothing of its own.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from wattwise.store.migrations import VERSION_TABLE


def run_migrations(connection: Connection) -> None:
    """Run Alembic's command on `connection`, in the caller's transaction, with wattwise's version table."""
    context.configure(connection=connection, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


# Alembic binds its proxy `alembic.context` only while it runs this file: a plain import does nothing.
if hasattr(context, "config"):
    run_migrations(context.config.attributes["connection"])
