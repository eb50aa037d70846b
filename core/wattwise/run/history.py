"""The end of a run: keep its folder and record it in the run history (`wattwise.store.runs`).

Keeping never stops a run: a folder that cannot be made, or a store that refuses the row, is one warning;
a store that cannot be reached spools the row (`wattwise.store.spool`), with one warning saying so. A
history that cannot be written for the cause the run already warned of (a read-only home, where the
settings journal could not be created either) adds no second warning: it is logged under `wattwise`.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from wattwise.errors import Unavailable, UsageError, plugin_warning
from wattwise.record.kept import LATEST, keep_folder, run_row
from wattwise.record.summary import RunSummary
from wattwise.store.history import RunRow, new_run_id


def keep_run(output_dir: str | os.PathLike[str], summary: RunSummary, *, store: str | None = None) -> RunRow | None:
    """Keep the run just written into `output_dir`: its own folder, and its row in the history.

    Never raises: a folder that cannot be made, or a store that refuses the row, is one warning (a store
    that cannot be reached spools the row instead, with one warning saying so). A history that cannot be
    written where the journal could not be created either (the summary's notes say so, and the user was
    warned at the start) is logged under `wattwise` at INFO instead of warned of a second time.

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
        own = Path(keep_folder(output_dir, run_id, world_size=summary.world_size or 1))
    except OSError as err:  # the row is recorded all the same, pointing at the output folder
        where = f"{err.filename}: " if err.filename else ""
        plugin_warning(
            f"wattwise: the run's files stay in {output_dir} but could not be kept in a folder of their own "
            f"({where}{err.strerror or err}); its row in the run history points there, and the next run into "
            f"{output_dir} replaces the files"
        )
        own = Path(output_dir)
    else:
        latest = Path(output_dir) / LATEST
        if not latest.is_symlink():
            plugin_warning(
                f"wattwise: {latest} is not the link wattwise keeps there (a folder or file of your own), so it "
                f"was left as it is; the run is kept in {own}"
            )
    row = run_row(summary, run_id=run_id, folder=own)
    try:
        spooled = record_run_at_end(row, location=store)
    except (UsageError, Unavailable, OSError) as err:
        message = (
            f"wattwise: run {run_id} is kept in {own} but not in the run history: {err}; "
            f"`wattwise runs add {own}` adds it as soon as the cause is fixed"
        )
        if _warned_already(err, summary.notes):
            logging.getLogger(__name__).info("%s (the same cause as the journal's, already warned of)", message)
        else:
            plugin_warning(message)
        return None
    if spooled is not None:
        plugin_warning(
            f"wattwise: the store could not be reached; run {run_id} waits in {spooled} and is added to the run "
            "history when the store is next opened (`wattwise jobs sync`)"
        )
    return row


#: The errors of a folder that this user may not write.
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def _warned_already(err: Exception, notes: Sequence[str]) -> bool:
    """Whether `err` has the cause the run already warned of, as the summary's notes say.

    That is: the journal folder could not be created, and the history's file or folder could not be made
    in a folder the journal folder lies in (a read-only home, or WATTWISE_HOME). Only a permission or
    read-only error counts; any other cause (a full disk, a store that refuses the row, a folder elsewhere)
    is warned of on its own.
    """
    if not isinstance(err, OSError) or err.errno not in _NOT_WRITABLE or not err.filename:
        return False
    unwritable = Path(os.fsdecode(err.filename)).parent  # where the file or folder could not be made
    said = "cannot create the journal folder "
    for note in notes:
        at = note.find(said)
        if at >= 0 and Path(note[at + len(said) :].split(" ", 1)[0]).is_relative_to(unwritable):
            return True
    return False
