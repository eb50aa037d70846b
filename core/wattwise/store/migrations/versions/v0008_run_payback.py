"""The run history's rows keep the run's one saving: its payback's run figures, as summary.json gives them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

Only nullable columns are added (a row recorded before has no payback: the readers show its saving as
recorded then, marked so), so wattwise 0.1.0 still works with the store and its version table stays at 1.
The columns are `summary.json`'s `power_limit.payback` figures for the run as a whole: its energy saved,
tuning included, with that figure's uncertainty, the time it added, the break-even (steps at the chosen
limit) and whether the run paid back. Readers of a store at 0003 to 0007 read its rows with no payback.
Frozen definitions: never import `wattwise.store.schema` here.
"""

from __future__ import annotations

import sqlalchemy as sa

from wattwise.store.migrations.versions import adding_history_columns

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: Adds the payback's run figures, nullable, in this order (their names are the payback's fields with `payback_`
#: before them): energy saved (J) with its uncertainty, time added (s), break-even, paid back; the downgrade
#: drops them.
upgrade, downgrade = adding_history_columns(
    ("payback_run_energy_saved_j", sa.Double),
    ("payback_run_energy_saved_uncertainty_j", sa.Double),
    ("payback_run_time_added_s", sa.Double),
    ("payback_break_even_steps", sa.Integer),
    ("payback_paid_back", sa.Boolean),
)
