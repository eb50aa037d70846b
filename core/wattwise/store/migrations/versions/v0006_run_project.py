"""The run history's rows name their project: `runs list --project` and the dashboard show one project's runs.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03

Only a nullable column is added (a row recorded before names no project: unknown), so wattwise 0.1.0
still works with the store and its version table stays at 1. Readers of a store at 0003 to 0005 read its
rows with no project. Frozen definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_history_columns

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

#: Adds `project`: the project the run belongs to (its git root's or folder's name, or the setting);
#: the downgrade drops it.
upgrade, downgrade = adding_history_columns(("project", sa.String(128)))
