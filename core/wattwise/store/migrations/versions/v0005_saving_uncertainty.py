"""The run history's rows say how precisely their saving is known: `runs list` and the dashboard give its ±.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03

Only a nullable column is added (a row recorded before has no uncertainty for its saving: unknown), so
wattwise 0.1.0 still works with the store and its version table stays at 1. Readers of a store at 0003 or
0004 read its rows with the saving's uncertainty unknown. Frozen definitions: never import
`wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_history_columns

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: Adds `saving_uncertainty_j`: how precisely the run's saving against the highest limit is known (J);
#: the downgrade drops it.
upgrade, downgrade = adding_history_columns(("saving_uncertainty_j", sa.Double()))
