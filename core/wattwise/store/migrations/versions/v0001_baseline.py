"""Baseline: the schema of wattwise 0.1.0 (jobs, runs, power limits by batch size, its version table).

Revision ID: 0001
Revises:
Create Date: 2026-11-23

A store made by 0.1.0 already has all of this: it is stamped at this revision, not upgraded through it.
Frozen table definitions: never import `wattwise.store.schema` here (it moves on; this revision must not).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create 0.1.0's tables, its schema version table holding 1 included."""
    op.create_table(
        "wattwise_jobs",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("batch_sizes", sa.Text, nullable=False),
        sa.Column("default_batch_size", sa.Integer, nullable=False),
        sa.Column("target_metric", sa.Double, nullable=False),
        sa.Column("metric_mode", sa.String(3), nullable=False),
        sa.Column("max_epochs", sa.Integer, nullable=False),
        sa.Column("max_power_w", sa.Double, nullable=False),
        sa.Column("eta", sa.Double, nullable=False),
        sa.Column("beta", sa.Double, nullable=False),
        sa.Column("created_at_s", sa.Double, nullable=False),
    )
    op.create_table(
        "wattwise_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_name", sa.String(128), sa.ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), nullable=False),
        sa.Column("batch_size", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("power_limit_w", sa.Double, nullable=True),
        sa.Column("cost_limit", sa.Double, nullable=True),
        sa.Column("epochs", sa.Integer, nullable=False),
        sa.Column("energy_j", sa.Double, nullable=True),
        sa.Column("time_s", sa.Double, nullable=True),
        sa.Column("cost", sa.Double, nullable=True),
        sa.Column("started_at_s", sa.Double, nullable=False),
        sa.Column("updated_at_s", sa.Double, nullable=False),
    )
    op.create_index("ix_wattwise_runs_job_name_id", "wattwise_runs", ["job_name", "id"])
    op.create_table(
        "wattwise_power_limits",
        sa.Column(
            "job_name", sa.String(128), sa.ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("batch_size", sa.Integer, primary_key=True),
        sa.Column("power_limit_w", sa.Double, nullable=False),
    )
    version = op.create_table("wattwise_schema_version", sa.Column("version", sa.Integer, nullable=False))
    op.bulk_insert(version, [{"version": 1}])


def downgrade() -> None:
    """Drop 0.1.0's tables."""
    for table in ("wattwise_schema_version", "wattwise_power_limits", "wattwise_runs", "wattwise_jobs"):
        op.drop_table(table)
