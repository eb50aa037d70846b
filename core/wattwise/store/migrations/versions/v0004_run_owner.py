"""The run history's rows carry their owner: only they (or the store's admin) forget or replace a run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03

Only a nullable column is added (a row recorded before has no owner: anyone may forget it, as before), so
wattwise 0.1.0 still works with the store and its version table stays at 1. Readers of a store at 0003 read
its rows with no owner. Frozen definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_history_columns

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: Adds `owner`: the user who recorded the run (the database user for PostgreSQL, the login on SQLite);
#: the downgrade drops it.
upgrade, downgrade = adding_history_columns(("owner", sa.String(128)))
