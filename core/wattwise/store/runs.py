"""The run history: every training run wattwise measured, one row each, in the store that holds recurring jobs.

This is what `wattwise runs` and the dashboard read. A run is recorded once, at its end, by its main process
(`record_run`); a store that cannot be reached then gets the row later, from the outage spool
(`wattwise.store.spool`, delivered when the store is next opened or by `wattwise jobs sync`), so no run
is lost. Recording the same run twice keeps one row (the later one).

The public API, each function opening the store at `location` (a SQLite file path or a database URL; None:
`$WATTWISE_STORE`, else the default SQLite file) and closing it:

- `record_run(row)`: store a run (spooled when the store is unreachable);
- `record_run_at_end(row)`: the same at a training run's end, through the spool for a local store;
- `list_history(job=, since=, status=)`: the runs, oldest first, and the rows that do not read as runs;
- `list_runs(job=, since=, status=)`: the runs alone;
- `get_run(run_id)`: one run, by its id or a prefix of it that only it has;
- `forget_run(run_id)`: remove one run's row, readable or not (its folder is left as it is).

The readers (`list_history`, `list_runs`, `get_run`, `get_runs`) open the store read-only: they never
create, migrate or lock it for writing, and show the runs waiting in the spool without delivering them.

Every row read back goes through one validating reader, `RunRow.from_dict` (the checks of `check_row`,
the bounds of `wattwise.bounds`), whether it comes from the database or from a spool file: a row that
fails is an `UnreadableRun` naming its id and the field, and costs that row alone. Why that reader and not
the codec's field definitions (`wattwise.codec`, a leaf the store may import): `check_row` also checks the
rows the store is given to write, built in code, and its messages give each figure's range from
`wattwise.bounds` (`energy_j must be a number, between 0 and 1e+15 J`), as a refused spooled run says;
the reader takes the codec's number checks (`is_number`, `is_whole`) and time format. Nor
pydantic's `TypeAdapter`: the codec measured its cost at a run's start and chose against it, and pydantic is
no dependency of the `store` extra; a second validator of the same fields would be two readers, not one.

`RunRow` (defined in `wattwise.store.history`) is one run, with exactly the fields of the `wattwise runs
list --json` contract; `RunRow.to_dict` gives that JSON object. Reading a store that does not exist yet creates nothing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from wattwise.codec import iso_utc
from wattwise.errors import UsageError
from wattwise.names import check_job_name
from wattwise.store.factory import default_store_url, store_url
from wattwise.store.history import (
    RunDict,
    RunListing,
    RunRow,
    UnreadableRun,
    check_owner,
    check_row,
    check_run_id,
    find_row,
    find_run,
    login_name,
    new_run_id,
    put_run,
    select_history,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from wattwise.store.sql import SqlJobStore

__all__ = [
    "RunDict",
    "RunListing",
    "RunRow",
    "UnreadableRun",
    "check_run_id",
    "forget_run",
    "get_run",
    "get_runs",
    "iso_utc",
    "list_history",
    "list_runs",
    "new_run_id",
    "record_run",
    "record_run_at_end",
    "store_exists",
]


# -- the public API ------------------------------------------------------------------------------------
def _url(location: str | None) -> str:
    return store_url(location) if location else default_store_url()


def store_exists(url: str) -> bool:
    """Whether there is a store at `url` to read.

    Always for a server; for SQLite when its file exists, or when runs wait in the spool for it (opening the
    store delivers them).
    """
    from sqlalchemy.engine import make_url

    from wattwise.store import spool

    if spool.pending(url):
        return True
    parsed = make_url(url)
    database = parsed.database or ""
    return parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or Path(database).exists()


@contextmanager
def _opened(url: str, *, read_only: bool = True) -> Iterator[SqlJobStore]:
    from wattwise.store.sql import READER_LOCK_TIMEOUT_S, SqlJobStore

    store = SqlJobStore(url, read_only=True, lock_timeout_s=READER_LOCK_TIMEOUT_S) if read_only else SqlJobStore(url)
    try:
        yield store
    finally:
        store.close()


def record_run(row: RunRow, *, location: str | None = None) -> Path | None:
    """Record a finished run in the history; spooled when the store cannot be reached, so never lost.

    Args:
        row: The run (`check_row` is applied first).
        location: A SQLite file path or a database URL; None: `$WATTWISE_STORE`, else the default file.

    Returns:
        None when the store has the row; else the spool file that keeps it until the store is back
        (delivered when the store is next opened, or by `wattwise jobs sync`).

    Raises:
        UsageError: the row is not a run's (a field outside its bound), or `location` is not a store.
    """
    from wattwise.store import spool

    check_row(row)
    url = _url(location)
    try:
        with _opened(url, read_only=False) as store:
            store.write(lambda conn: put_run(conn, row))
    except spool.StoreUnavailable:
        return spool.spool_run(url, row)
    return None


#: The file in a run's own folder that keeps its row when neither the spool nor the store could take it
#: (a full home disk at the run's end), until the next run into the same output folder adds it.
KEPT_ROW = "history-row.json"
#: The folder of an output folder that holds each run's own folder (`wattwise.record.kept.RUNS_FOLDER`).
RUNS_FOLDER = "runs"


def record_run_at_end(row: RunRow, *, location: str | None = None) -> Path | None:
    """Record a run as it ends, at the least cost to the training process.

    A local SQLite store gets the row through its spool, the store's inbox: the file is delivered the
    next time anything opens the store (`wattwise runs`, the dashboard, a recurring run, `wattwise jobs
    sync`), so the end of a training run neither imports SQLAlchemy nor opens a database (about 1 CPU-s
    on the 2-core development machine). A server store (PostgreSQL, shared by a team) is written at once,
    as `record_run` does, so the team sees the run when it ends.

    A spool that cannot take the row (its folder made by another user in a shared home, a disk full there)
    does not lose it: the store is written at once instead, as `record_run` does; when that fails too,
    the row is kept in the run's own folder (`KEPT_ROW`), and the end of the next run into the same output
    folder (or `wattwise runs add FOLDER`) adds it. Rows kept so beside this run's folder are added first.

    Args:
        row: The run (`check_row` is applied first).
        location: As for `record_run`.

    Returns:
        The spool file only when a store could not be reached (see `record_run`); None otherwise.

    Raises:
        UsageError: as for `record_run`.
        OSError: the row could be written nowhere but its own folder (the message says where it is kept,
            and what adds it), or not even there (the spool's reason).
    """
    from wattwise.store import spool

    check_row(row)
    url = _url(location)
    _add_kept_rows(Path(row.folder), location)
    if url.startswith("sqlite"):
        try:
            spool.spool_run(url, row)
        except OSError as err:  # the spool cannot take it (a folder another user made, a full disk): the store
            try:
                return record_run(row, location=location)
            except (UsageError, spool.StoreUnavailable, OSError):
                raise _kept_in_folder(row, err) from None  # neither can: kept in its folder, the spool's reason
        return None
    try:
        return record_run(row, location=location)
    except OSError as err:  # no spool to fall back on (a full disk in the home): kept in its own folder
        raise _kept_in_folder(row, err) from None


def _kept_in_folder(row: RunRow, err: OSError) -> OSError:
    """Keep `row` in its own folder (`KEPT_ROW`) for the next run to add; the error to raise, saying where.

    When that cannot be written either, `err` itself.
    """
    from wattwise.store import spool

    folder = Path(row.folder)
    path = folder / KEPT_ROW
    try:
        spool.write_run_file(path, row)
    except OSError:
        return err
    output = folder.parent.parent if folder.parent.name == RUNS_FOLDER else folder
    return OSError(
        err.errno,
        f"{err.strerror or err}; its row is kept in {path} until the end of the next run into {output}, which adds it",
        err.filename,  # what could not be written, as the spool said
    )


def _add_kept_rows(folder: Path, location: str | None) -> None:
    """Add the rows kept in the own folders beside `folder` (`KEPT_ROW`) by runs whose history was not written.

    Each file is removed once the spool or the store has its row; a file that is not a run of yours stays.
    """
    from wattwise.safe_files import UntrustedFile
    from wattwise.store import spool

    if folder.parent.name != RUNS_FOLDER:
        return
    try:
        siblings = sorted(os.scandir(folder.parent), key=lambda entry: entry.name)
    except OSError:
        return
    for entry in siblings:
        path = Path(entry.path) / KEPT_ROW
        if entry.path == str(folder) or not os.path.lexists(path):
            continue
        try:
            kept = spool.read(path)
            if isinstance(kept, RunRow):
                _record_kept(kept, location)
                path.unlink()
        except (OSError, ValueError, UsageError, UntrustedFile, spool.StoreUnavailable):
            continue  # still kept: the next run tries again


def _record_kept(row: RunRow, location: str | None) -> None:
    """A kept row into the spool of a local store (else the store itself), as `record_run_at_end` records it."""
    from wattwise.store import spool

    url = _url(location)
    if url.startswith("sqlite"):
        try:
            spool.spool_run(url, row)
            return
        except OSError:
            pass
    record_run(row, location=location)  # spooled when the store cannot be reached: delivered when next opened


def _spooled(url: str) -> list[RunRow]:
    """The runs of the history that wait in your spool for the store at `url`, read (never delivered) as a reader.

    A file that is not a run of yours that reads is left for the store's next writer to deliver or set aside.
    """
    from wattwise.safe_files import UntrustedFile
    from wattwise.store import spool

    rows = []
    for path in spool.pending(url):
        try:
            result = spool.read(path)
        except (OSError, ValueError, UntrustedFile):
            continue
        if isinstance(result, RunRow):  # your own file: its owner, as the store will name it on SQLite
            rows.append(dataclasses.replace(result, owner=login_name()) if url.startswith("sqlite") else result)
    return rows


def _matches(row: RunRow, job: str | None, since: float | None, status: str | None, project: str | None = None) -> bool:
    return (
        (job is None or row.job == job)
        and (since is None or row.start_s >= since)
        and (status is None or row.status == status)
        and (project is None or row.project == project)
    )


def list_history(
    job: str | None = None,
    since: float | None = None,
    status: str | None = None,
    *,
    project: str | None = None,
    location: str | None = None,
) -> RunListing:
    """The runs in the history that match every filter given, oldest first, and the rows that do not read.

    A reader: the store is opened read-only (`SqlJobStore(read_only=True)`), so it is never created,
    migrated or locked for writing, and the runs waiting in the spool for it are shown as they are (not
    delivered). A row that is not a run's costs that row alone: it is listed in `unreadable` with its id.

    Args:
        job: Only this job's runs.
        since: Only runs that started at or after this time (seconds since the epoch).
        status: Only runs that ended so ("completed", "failed", "interrupted", ...).
        project: Only this project's runs (`wattwise.project`).
        location: The store (see `record_run`).

    Raises:
        UsageError: `job` is not a job name, `location` is not a store, or the store needs upgrading.
        StoreUnavailable: the store cannot be reached.
    """
    if job is not None:
        check_job_name(job, setting="job")
    url = _url(location)
    spooled = [row for row in _spooled(url) if _matches(row, job, since, status, project)]
    listing = RunListing([], [])
    if _database_exists(url):
        with _opened(url) as store:
            if store.holds_tables:
                listing = store.read(
                    lambda conn: select_history(conn, job=job, since_s=since, status=status, project=project)
                )
    if not spooled:
        return listing
    waiting = {row.id: row for row in spooled}
    runs = [row for row in listing.runs if row.id not in waiting] + list(waiting.values())
    unreadable = [row for row in listing.unreadable if row.id not in waiting]
    return RunListing(sorted(runs, key=lambda r: (r.start_s, r.id)), unreadable)


def list_runs(
    job: str | None = None,
    since: float | None = None,
    status: str | None = None,
    *,
    location: str | None = None,
) -> list[RunRow]:
    """The runs in the history that match every filter given, oldest first (`list_history`'s runs).

    Raises:
        UsageError: `job` is not a job name, `location` is not a store, or the store needs upgrading.
        StoreUnavailable: the store cannot be reached.
    """
    return list_history(job, since, status, location=location).runs


def _database_exists(url: str) -> bool:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    database = parsed.database or ""
    return parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or Path(database).exists()


def _in_spool(run_id: str, spooled: Sequence[RunRow]) -> RunRow | None:
    exact = [row for row in spooled if row.id == run_id]
    starting = [row for row in spooled if row.id.startswith(run_id)]
    return exact[0] if exact else starting[0] if len(starting) == 1 else None


def _find(conn: Connection | None, run_id: str, spooled: Sequence[RunRow]) -> RunRow:
    """The run `run_id` names: one waiting in the spool (it is the newer), else the store's (`find_run`)."""
    waiting = _in_spool(run_id, spooled)
    if waiting is not None and (waiting.id == run_id or conn is None):
        return waiting
    if conn is None:
        raise UsageError(f"no run {run_id!r} in the store (see `wattwise runs list`)")
    try:
        return find_run(conn, run_id)
    except UsageError:
        if waiting is not None:
            return waiting
        raise


def get_run(run_id: str, *, location: str | None = None) -> RunRow:
    """One run, by its id or by a prefix of it that no other run's id has (a reader, as `list_history`).

    Raises:
        UsageError: not a run id, no such run, a prefix several runs share, a row that does not read (saying
            how to remove it); `location` not a store.
        StoreUnavailable: the store cannot be reached.
    """
    return get_runs([run_id], location=location)[0]


def get_runs(run_ids: Sequence[str], *, location: str | None = None) -> list[RunRow]:
    """Several runs (`get_run` each), in the order given, from one read-only opening of the store."""
    for run_id in run_ids:
        check_run_id(run_id)
    url = _url(location)
    spooled = _spooled(url)
    if not _database_exists(url):
        return [_find(None, run_id, spooled) for run_id in run_ids]
    with _opened(url) as store:
        if not store.holds_tables:
            return [_find(None, run_id, spooled) for run_id in run_ids]
        return store.read(lambda conn: [_find(conn, run_id, spooled) for run_id in run_ids])


def forget_run(run_id: str, *, location: str | None = None) -> RunRow | UnreadableRun:
    """Remove one run's row from the history (by id or unique prefix); its folder is left as it is.

    A row that does not read as a run (`UnreadableRun`) is removed all the same. Only the run's owner, or
    the store's admin (`wattwise.store.history.is_store_admin`), may forget it.

    Returns:
        The run forgotten.

    Raises:
        UsageError: not a run id, no such run, or an ambiguous prefix.
        StoreUnavailable: the store cannot be reached.
    """
    from sqlalchemy import delete

    from wattwise.store.schema import run_history_table as table

    check_run_id(run_id)
    url = _url(location)
    if not store_exists(url):
        raise UsageError(f"no run {run_id!r} in the store (see `wattwise runs list`)")

    def work(conn: Connection) -> RunRow | UnreadableRun:
        from sqlalchemy import select

        row = find_row(conn, run_id)
        owner = conn.execute(select(table.c.owner).where(table.c.id == row.id)).scalar()
        check_owner(conn, row.id, owner if isinstance(owner, str) else None, doing="forget")
        conn.execute(delete(table).where(table.c.id == row.id))
        return row

    with _opened(url, read_only=False) as store:
        return store.write(work)
