"""The store's Alembic revisions, one file each (`v<revision>_<slug>.py`), read by Alembic in order.

A revision that only adds a table gets its upgrade and downgrade from `adding_table`, one that only adds
nullable columns to the run history from `adding_history_columns`: the downgrade undoes exactly what the
upgrade did, from the same definitions. Each revision keeps its own frozen definitions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa

#: The run history's table, as every revision since 0003 names it.
RUN_HISTORY = "wattwise_run_history"

#: A revision's `upgrade` and `downgrade`, as Alembic calls them from its module.
Steps = tuple[Callable[[], None], Callable[[], None]]


def adding_table(
    name: str, columns: Callable[[], Sequence[sa.Column[Any]]], *, indexes: Sequence[tuple[str, list[str]]] = ()
) -> Steps:
    """The steps of a revision that only adds the table `name`: create it of `columns()`, and drop it.

    `columns` makes the columns afresh at each upgrade (a column belongs to the one table made of it).
    `indexes`: (name, columns) of each index created on the table after it, in order (dropped with it).
    """

    def upgrade() -> None:
        from alembic import op

        op.create_table(name, *columns())
        for index, indexed in indexes:
            op.create_index(index, name, indexed)

    def downgrade() -> None:
        from alembic import op

        op.drop_table(name)

    return upgrade, downgrade


def adding_history_columns(*columns: tuple[str, sa.types.TypeEngine[Any] | type[sa.types.TypeEngine[Any]]]) -> Steps:
    """The steps of a revision that only adds nullable `(name, type)` columns to the run history, and drops them.

    Both run as a batch (SQLite needs one; PostgreSQL alike); the downgrade drops the columns last added first.
    """

    def upgrade() -> None:
        import sqlalchemy as sa
        from alembic import op

        with op.batch_alter_table(RUN_HISTORY) as batch:
            for name, kind in columns:
                batch.add_column(sa.Column(name, kind, nullable=True))

    def downgrade() -> None:
        from alembic import op

        with op.batch_alter_table(RUN_HISTORY) as batch:
            for name, _ in reversed(columns):
                batch.drop_column(name)

    return upgrade, downgrade
