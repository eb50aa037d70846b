"""The end of a run: keep its folder and record it in the run history (`wattwise.store.runs`).

Keeping never stops a run: a folder that cannot be made, or a store that refuses the row, is one warning;
a store that cannot be reached spools the row (`wattwise.store.spool`), with one warning saying so.
"""

from __future__ import annotations

import os

from wattwise.errors import Unavailable, UsageError, plugin_warning
from wattwise.record.kept import keep_folder, run_row
from wattwise.record.summary import RunSummary
from wattwise.store.history import RunRow, new_run_id


def keep_run(output_dir: str | os.PathLike[str], summary: RunSummary, *, store: str | None = None) -> RunRow | None:
    """Keep the run just written into `output_dir`: its own folder, and its row in the history.

    Never raises: a folder that cannot be made, or a store that refuses the row, is one warning (a store
    that cannot be reached spools the row instead, with one warning saying so).

    Args:
        output_dir: Where the run wrote summary.json, power.csv and windows.csv.
        summary: The run's summary, as written there.
        store: The store (a SQLite file path or a database URL); None: `$WATTWISE_STORE`, else the default.

    Returns:
        The row recorded (or spooled); None when the run could not be kept.
    """
    from wattwise.store.runs import record_run_at_end

    run_id = new_run_id(summary.start_s)
    try:
        own = keep_folder(output_dir, run_id, world_size=summary.world_size or 1)
    except OSError as err:
        plugin_warning(
            f"wattwise: the run's files stay in {output_dir} but could not be kept in a folder of their own "
            f"({err.strerror or err}); the next run into {output_dir} replaces them"
        )
        return None
    row = run_row(summary, run_id=run_id, folder=own)
    try:
        spooled = record_run_at_end(row, location=store)
    except (UsageError, Unavailable, OSError) as err:
        plugin_warning(f"wattwise: run {run_id} is kept in {own} but not in the run history: {err}")
        return None
    if spooled is not None:
        plugin_warning(
            f"wattwise: the store could not be reached; run {run_id} waits in {spooled} and is added to the run "
            "history when the store is next opened (`wattwise jobs sync`)"
        )
    return row
