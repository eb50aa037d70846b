"""Tuning that spans runs: a run that could not profile every limit keeps what it profiled for the next one.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03

Only a table is added, so wattwise 0.1.0 still works with the store and its version table stays at 1.
One row per key of `wattwise.store.limits_memory.memory_key` (job, GPU model and count, batch size): the
tuner's state where the run ended, how many limits it had profiled of how many, when, and by which run.
A limit is remembered as chosen (`wattwise_remembered_limits`) only from a finished profile. Frozen table
definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_table

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: Creates the tuning-progress table; the downgrade drops it.
upgrade, downgrade = adding_table(
    "wattwise_tuning_progress",
    lambda: (
        sa.Column("memory_key", sa.Text, primary_key=True),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("profiled", sa.Integer, nullable=False),
        sa.Column("limits", sa.Integer, nullable=False),
        sa.Column("updated_at_s", sa.Double, nullable=False),
        sa.Column("run_id", sa.String(256), nullable=True),
    ),
)
