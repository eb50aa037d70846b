"""The store's Alembic revisions, one file each (`v<revision>_<slug>.py`), read by Alembic in order.

The revisions that only add nullable columns to the run history do it with `add_history_columns` and undo
it with `drop_history_columns`; each revision keeps its own frozen column definitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sqlalchemy as sa

#: The run history's table, as every revision since 0003 names it.
RUN_HISTORY = "wattwise_run_history"


def add_history_columns(*columns: sa.Column) -> None:
    """Add `columns` to the run history (SQLite and PostgreSQL alike: a batch, which SQLite needs)."""
    from alembic import op

    with op.batch_alter_table(RUN_HISTORY) as batch:
        for column in columns:
            batch.add_column(column)


def drop_history_columns(*names: str) -> None:
    """Drop the run history's columns `names`, in that order."""
    from alembic import op

    with op.batch_alter_table(RUN_HISTORY) as batch:
        for name in names:
            batch.drop_column(name)
