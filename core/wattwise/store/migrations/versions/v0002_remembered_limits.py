"""Remembered power limits move from `power_limits.json` into the store, with who chose them and how.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

Only a table is added: wattwise 0.1.0 still works with the store, so its version table stays at 1.
(The JSON file's entries are imported by `wattwise.store.limits_memory` on first use, on the machine that
has the file.) Frozen table definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_table

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: Creates the remembered-limits table; the downgrade drops it.
upgrade, downgrade = adding_table(
    "wattwise_remembered_limits",
    lambda: (
        sa.Column("memory_key", sa.Text, primary_key=True),
        sa.Column("power_limit_w", sa.Double, nullable=False),
        sa.Column("time_s", sa.Double, nullable=False),
        sa.Column("energy_j", sa.Double, nullable=False),
        sa.Column("profile", sa.Text, nullable=False),
        sa.Column("selector", sa.String(32), nullable=True),
        sa.Column("eta", sa.Double, nullable=True),
        sa.Column("chosen_at_s", sa.Double, nullable=True),
        sa.Column("run_id", sa.String(256), nullable=True),
    ),
)
