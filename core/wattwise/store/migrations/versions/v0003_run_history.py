"""The run history: one row per training run wattwise measured, for `wattwise runs` and the dashboard.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02

Only a table is added: wattwise 0.1.0 still works with the store, so its version table stays at 1.
Frozen table definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_table

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

#: Creates the run-history table and its indexes (by start, and by job then start); the downgrade drops the
#: table (its indexes go with it).
upgrade, downgrade = adding_table(
    "wattwise_run_history",
    lambda: (
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("job", sa.String(128), nullable=True),
        sa.Column("framework", sa.String(32), nullable=True),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("status", sa.String(32), nullable=True),
        sa.Column("start_s", sa.Double, nullable=False),
        sa.Column("end_s", sa.Double, nullable=False),
        sa.Column("devices", sa.Text, nullable=False),
        sa.Column("time_s", sa.Double, nullable=False),
        sa.Column("energy_j", sa.Double, nullable=False),
        sa.Column("energy_uncertainty_j", sa.Double, nullable=True),
        sa.Column("power_limit_w", sa.Double, nullable=True),
        sa.Column("saving_j", sa.Double, nullable=True),
        sa.Column("time_cost_s", sa.Double, nullable=True),
        sa.Column("folder", sa.Text, nullable=False),
        sa.Column("simulated", sa.Boolean, nullable=False),
    ),
    indexes=(
        ("ix_wattwise_run_history_start_s", ["start_s"]),
        ("ix_wattwise_run_history_job_start_s", ["job", "start_s"]),
    ),
)
