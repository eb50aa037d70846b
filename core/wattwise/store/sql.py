"""`SqlJobStore`: the store on SQLAlchemy (a SQLite file by default, PostgreSQL by URL).

One database holds recurring jobs, their runs and remembered power limits (`wattwise.store.schema`);
opening it upgrades its schema first (`wattwise.store.migrations`, Alembic). Besides the `JobStore`
methods, `write` and `read` run other work on the same tables with the same safety
(`wattwise.store.limits_memory` uses them).

SQLite: WAL journal (readers never block the writer), a busy timeout, and every write transaction
begun IMMEDIATE, so that a writer takes the lock before reading what it will update and two writers
never deadlock on a lock upgrade; a new file and its folder are created readable by their owner only.
PostgreSQL: `start_run` locks the job's row, so two processes starting runs of one job decide one after
the other. On both, a write that still meets a lock or a serialization failure is retried with a
growing, jittered back-off until `lock_timeout_s` runs out.

A lost connection (PostgreSQL stopped or restarting, a SQLite file that cannot be opened or written) is
retried with a doubling back-off for `reconnect_s` (6 s: a server restarted within 3 s is waited for);
after that, or when the lock timeout runs out, the store raises `StoreUnavailable` and the optimizer
spools the run's result (`wattwise.store.spool`). Opening the store delivers the results spooled
for it first.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.pool import NullPool, StaticPool

from wattwise.copying import dataclass_of
from wattwise.errors import UsageError, plugin_warning
from wattwise.recurring.spec import JobSpec, StoredRun
from wattwise.safe_files import UntrustedFile, file_owner, private_dir, set_aside_saying
from wattwise.store import spool
from wattwise.store.base import (
    ChooseFn,
    JobStore,
    check_power_limit,
    check_same_spec,
    finished_run,
    job_dict,
    unknown_job,
    unknown_run,
)
from wattwise.store.history import RunRow, put_run
from wattwise.store.migrations import check_readable, upgrade
from wattwise.store.schema import jobs_table, limits_table, runs_table
from wattwise.store.spool import SpooledResult, StoreUnavailable
from wattwise.vocabulary import MetricMode, RecurringRunState

T = TypeVar("T")

#: PostgreSQL SQLSTATEs worth retrying: serialization failure, deadlock, lock not available.
_PG_RETRY_STATES = frozenset({"40001", "40P01", "55P03"})


def _retryable(err: DBAPIError) -> bool:
    if isinstance(err.orig, sqlite3.OperationalError):
        message = str(err.orig).lower()
        return "locked" in message or "busy" in message
    return getattr(err.orig, "sqlstate", None) in _PG_RETRY_STATES


#: SQLite's words for a file it cannot reach or write now (rather than a bad statement): a full disk too.
_SQLITE_UNREACHABLE = ("unable to open", "readonly", "disk i/o", "disk is full")


def _connection_lost(err: DBAPIError) -> bool:
    """The connection failed or broke (server down, restarting; file unreachable), not the statement."""
    if err.connection_invalidated or isinstance(err, InterfaceError):
        return True
    if isinstance(err.orig, sqlite3.Error):
        message = str(err.orig).lower()
        return any(words in message for words in _SQLITE_UNREACHABLE)
    return isinstance(err, OperationalError) and not _retryable(err)


def _reason(err: DBAPIError) -> str:
    return " ".join(str(err.orig).split())


def _spec_row(spec: JobSpec, now_s: float) -> dict[str, object]:
    """The jobs table's row of `spec`: its settings (`job_dict`), the batch sizes as JSON text, when registered."""
    return {**job_dict(spec), "batch_sizes": json.dumps(list(spec.batch_sizes)), "created_at_s": now_s}


class UnreadableJob(UsageError):
    """A recurring job's row that does not read as its settings (a hand edit, a crash mid-write).

    The message names the job and how to remove it.
    """


def _spec(row: Row[Any]) -> JobSpec:
    """The job's settings in its row, checked as `JobSpec` checks them.

    Raises:
        UnreadableJob: the row is not a job's (batch_sizes not a JSON list, a field out of its bounds).
    """
    try:
        sizes = json.loads(row.batch_sizes)
        if not isinstance(sizes, list):
            raise ValueError(f"batch_sizes is not a JSON list (got {row.batch_sizes!r:.40})")
        return dataclass_of(
            JobSpec,
            row,
            batch_sizes=tuple(sizes),
            metric_mode=MetricMode.MIN if row.metric_mode == MetricMode.MIN else MetricMode.MAX,
        )
    except (ValueError, TypeError, RecursionError) as err:  # a UsageError is a ValueError too
        name = str(row.name)[:64].encode("unicode_escape").decode("ascii")
        raise UnreadableJob(
            f"job {name}: its row in the store is unreadable ({' '.join(str(err).split())}); "
            f"`wattwise jobs reset {name}` removes it"
        ) from None


def _run(row: Row[Any]) -> StoredRun:
    return dataclass_of(
        StoredRun, row, run_id=row.id, cost_limit=math.inf if row.cost_limit is None else row.cost_limit
    )


def _same_result(run: StoredRun, values: Mapping[str, object]) -> bool:
    """A finished run already holds the result in `values` (a finish_run's columns)."""
    return "state" in values and all(
        getattr(run, key) == values[key] for key in ("state", "epochs", "energy_j", "time_s", "cost")
    )


def _on_sqlite_connect(busy_timeout_s: float, file_backed: bool, read_only: bool = False) -> Callable[[Any, Any], None]:
    def configure(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's "begin" hook below emits BEGIN; the driver must not start transactions itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if file_backed and not read_only:  # a reader leaves the journal as the writers set it
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return configure


def _on_sqlite_begin(conn: Connection) -> None:
    mode = "IMMEDIATE" if conn.get_execution_options().get("wattwise_write") else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def _create_private_file(path: Path) -> None:
    """Create a missing SQLite file (and its folders) for its owner only; SQLite gives its WAL the same mode."""
    private_dir(path.parent)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _check_access(path: Path, *, read_only: bool = False) -> None:
    """Refuse at once a SQLite file this user may not read (and, unless `read_only`, write), saying so.

    SQLite would only say "unable to open database file", which the store retries as an outage.
    """
    if read_only:
        if not os.access(path, os.R_OK):
            raise UsageError(f"store {path}: cannot be read by this user (Permission denied); check its permissions")
        return
    if not os.access(path, os.R_OK | os.W_OK):
        raise UsageError(
            f"store {path}: cannot be read and written by this user (Permission denied); check its "
            "permissions (every process using a store needs read and write access to its file)"
        )


def _read_only_sqlite(path: Path, busy_timeout_s: float) -> Callable[[], sqlite3.Connection]:
    """Connections to the SQLite file `path` opened read-only (`mode=ro`): SQLite refuses every write on them."""
    uri = f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False)

    return connect


def make_engine(url: str, *, busy_timeout_s: float = 30.0, read_only: bool = False) -> Engine:
    """An engine for `url`, with SQLite's WAL, busy timeout and IMMEDIATE write transactions.

    A SQLite file is created owner-only when missing; a PostgreSQL connection attempt gives up after
    5 s unless the URL says otherwise, so that the store's retries can follow.

    Args:
        url: A SQLAlchemy URL (`wattwise.store.factory.store_url` makes one from a path or URL).
        busy_timeout_s: How long SQLite waits for another writer's lock before failing.
        read_only: A reader's engine: a SQLite file is opened with `mode=ro` and never created (its
            journal mode is left as it is); a PostgreSQL transaction is begun READ ONLY.

    Raises:
        UsageError: not a database URL, no driver for it, or a file that cannot be created or used.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise UsageError(f"store URL {url!r} is not a database URL; give a SQLite file path or a URL") from err
    try:
        if parsed.get_backend_name() != "sqlite":
            # A host that does not answer fails the connection in seconds, so that retries can follow.
            unset = parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query
            connect_args = {"connect_timeout": 5} if unset else {}
            server = create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
            return server.execution_options(postgresql_readonly=True) if read_only else server
        database = parsed.database or ""
        file_backed = database not in ("", ":memory:")
        if file_backed and read_only:
            path = Path(database).expanduser()
            _check_access(path, read_only=True)
            engine = create_engine("sqlite://", creator=_read_only_sqlite(path, busy_timeout_s), poolclass=NullPool)
        elif file_backed:
            path = Path(database).expanduser()
            _create_private_file(path)
            _check_access(path)
            engine = create_engine(parsed, connect_args={"timeout": busy_timeout_s})
        else:
            engine = create_engine(parsed, connect_args={"check_same_thread": False}, poolclass=StaticPool)
    except NoSuchModuleError as err:
        raise UsageError(
            f"store URL {url!r}: SQLAlchemy has no driver for {parsed.drivername!r}; use sqlite:/// or "
            f"postgresql:// (with psycopg installed)"
        ) from err
    except (ImportError, OSError) as err:
        raise UsageError(f"store {url!r}: {err}") from err
    event.listen(engine, "connect", _on_sqlite_connect(busy_timeout_s, file_backed, read_only))
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


#: How long a reader waits for a lock (a store not in WAL mode, held by a writer) before `StoreUnavailable`:
#: a page or `runs list` says so in seconds rather than waiting out a writer's 120 s.
READER_LOCK_TIMEOUT_S = 10.0


class SqlJobStore(JobStore):
    """A `JobStore` in a SQL database; see the module docstring for how writers stay safe.

    Opening it upgrades the schema (`wattwise.store.migrations.upgrade`) and delivers the results
    spooled while it was unreachable. A reader's store (`read_only`: `wattwise runs list`, the dashboard)
    does neither: it opens the database read-only (SQLite `mode=ro`, a PostgreSQL READ ONLY transaction),
    so it never takes the write lock, never migrates and never delivers; a store at an older revision is
    refused with one line saying how to upgrade it (`check_readable`), and `write` is refused.

    Args:
        url: A SQLAlchemy URL (SQLite or PostgreSQL).
        lock_timeout_s: How long a write waits for a locked store before `StoreUnavailable`.
        reconnect_s: How long a lost connection is retried before `StoreUnavailable`.
        read_only: Open it as a reader (see above).

    Raises:
        UsageError: not a store (bad URL, not a database, a newer wattwise's store; for a reader, an older one).
        StoreUnavailable: the database cannot be reached or stays locked.
    """

    def __init__(
        self, url: str, *, lock_timeout_s: float = 120.0, reconnect_s: float = 6.0, read_only: bool = False
    ) -> None:
        self.url = url
        self.read_only = read_only
        self.holds_tables = True
        self._engine = make_engine(url, busy_timeout_s=min(30.0, lock_timeout_s), read_only=read_only)
        self._writer = self._engine.execution_options(wattwise_write=True)
        self._lock_timeout_s = lock_timeout_s
        self._reconnect_s = reconnect_s
        try:
            if read_only:
                #: False for a reader's database with no table at all (an empty file): nothing to read.
                self.holds_tables = self.read(functools.partial(check_readable, store=self.describe())) is not None
                return
            self.write(upgrade)
        except StoreUnavailable as err:
            raise StoreUnavailable(
                f"cannot open the job store {self.describe()}: {err.reason}", url=url, reason=err.reason
            ) from err
        except OperationalError as err:
            raise UsageError(f"cannot open the job store {self.describe()}: {_reason(err)}") from err
        except DatabaseError as err:  # a file that is not a database, or a database that is not a store
            raise UsageError(
                f"cannot open the job store {self.describe()}: {_reason(err)}; give the path of a "
                "wattwise store (a SQLite file) or a database URL"
            ) from err
        self.deliver_spooled()

    def describe(self) -> str:
        """The store's URL with any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    def _unavailable(self, err: DBAPIError, waited: str) -> StoreUnavailable:
        reason = f"{_reason(err)} ({waited})"
        return StoreUnavailable(f"cannot reach the job store {self.describe()}: {reason}", url=self.url, reason=reason)

    def _retrying(self, engine: Engine, work: Callable[[Connection], T]) -> T:
        start = time.monotonic()
        lock_delay_s, reconnect_delay_s = 0.005, 0.1
        while True:
            try:
                with engine.begin() as conn:
                    return work(conn)
            except DBAPIError as err:
                waited = time.monotonic() - start
                if _retryable(err):
                    if waited + lock_delay_s > self._lock_timeout_s:
                        raise self._unavailable(err, f"still locked after {waited:.3g} s") from err
                    time.sleep(lock_delay_s * (0.5 + random.random()))
                    lock_delay_s = min(lock_delay_s * 2, 0.5)
                elif _connection_lost(err):
                    if waited + reconnect_delay_s > self._reconnect_s:
                        raise self._unavailable(err, f"retried for {waited:.3g} s") from err
                    time.sleep(reconnect_delay_s)
                    reconnect_delay_s = min(reconnect_delay_s * 2, 1.0)
                else:
                    raise

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one write transaction (SQLite: begun IMMEDIATE), retried while the store is locked.

        Args:
            work: Given the connection; it may run more than once, so it must only touch the database.

        Returns:
            What `work` returned, once committed.

        Raises:
            StoreUnavailable: still locked after the lock timeout, or unreachable after the reconnect time.
            UsageError: the store was opened read-only.
        """
        if self.read_only:
            raise UsageError(f"the job store {self.describe()} was opened to read only; nothing is written")
        return self._retrying(self._writer, work)

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one read transaction, retried as `write` retries.

        Raises:
            StoreUnavailable: still locked after the lock timeout, or unreachable after the reconnect time.
        """
        return self._retrying(self._engine, work)

    def deliver_spooled(self) -> tuple[int, int]:
        """Record the results spooled for this store while it was unreachable: (delivered, still pending).

        Each in its own transaction, its file removed once committed. A run that already has a result
        keeps it (delivering twice records once). Only your own files are delivered (`spool.read`); one
        warning names the files of other users, which are left where they are. A file of yours that cannot
        be read, is not a regular file, or holds a field that is not what a run gives the store, and a
        result whose job or run the store no longer has (the job was reset), is set aside as
        `NAME.rejected` with one warning naming the file and why. `StoreUnavailable` when the store goes
        away meanwhile (what is left stays spooled).
        """
        skipped = spool.not_yours(self.url)
        delivered = 0
        for path in spool.pending(self.url):
            try:
                result = spool.read(path)
            except FileNotFoundError:  # another process delivered it meanwhile
                continue
            except UntrustedFile as err:
                if err.mine:
                    self._reject(path, f"it {err}")
                else:
                    skipped.append(path)
                continue
            except ValueError as err:
                self._reject(path, f"it is not a spooled result: {err}")
                continue
            deliver = (
                functools.partial(put_run, row=result)
                if isinstance(result, RunRow)
                else functools.partial(self._deliver, result=result)
            )
            try:
                self.write(deliver)
            except UsageError as err:  # a StoreUnavailable is no UsageError: it propagates
                self._reject(path, str(err))
                continue
            spool.remove(path)
            delivered += 1
        if skipped:
            self._skip(skipped)
        return delivered, len(spool.pending(self.url))

    def _reject(self, path: Path, why: str) -> None:
        plugin_warning(
            f"wattwise: the spooled result {path} was not delivered to the job store {self.describe()}: "
            f"{why}; it is {set_aside_saying(path)}",
            stacklevel=3,
        )

    def _skip(self, paths: list[Path]) -> None:
        owners = sorted({str(uid) for path in paths if (uid := file_owner(path)) is not None})
        plugin_warning(
            f"wattwise: {len(paths)} spooled result(s) in {paths[0].parent} belong to another user "
            f"(uid {', '.join(owners) or 'unknown'}) and were not delivered to the job store "
            f"{self.describe()}: {', '.join(path.name for path in paths)}; only the user who spooled a "
            "result delivers it (`wattwise jobs sync` as that user)",
            stacklevel=3,
        )

    def _deliver(self, conn: Connection, *, result: SpooledResult) -> None:
        self._lock_job(conn, result.job)
        run = self._get_run(conn, result.job, result.run_id)
        if run.finished:
            return
        if result.power_limit_w is not None:
            self._set_limit(conn, result.job, run.batch_size, result.power_limit_w)
        conn.execute(
            update(runs_table)
            .where(runs_table.c.id == result.run_id)
            .values(
                state=RecurringRunState.REACHED if result.reached else RecurringRunState.FAILED,
                epochs=run.epochs if result.epochs is None else result.epochs,
                energy_j=result.energy_j,
                time_s=result.time_s,
                cost=result.cost,
                updated_at_s=result.now_s,
                power_limit_w=run.power_limit_w
                if run.power_limit_w is not None
                else self._limits(conn, result.job).get(run.batch_size),
            )
        )

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A read transaction (for inspection and tests)."""
        with self._engine.begin() as conn:
            yield conn

    def register_job(self, spec: JobSpec, now_s: float) -> None:
        def work(conn: Connection) -> None:
            row = conn.execute(select(jobs_table).where(jobs_table.c.name == spec.name)).first()
            if row is None:
                conn.execute(insert(jobs_table).values(**_spec_row(spec, now_s)))
            else:
                check_same_spec(_spec(row), spec)

        try:
            self.write(work)
        except IntegrityError:
            # Another process inserted the job between our read and our insert (PostgreSQL): it is
            # there now, so checking again compares the settings.
            self.write(work)

    def get_job(self, name: str) -> JobSpec | None:
        row = self.read(lambda conn: conn.execute(select(jobs_table).where(jobs_table.c.name == name)).first())
        return None if row is None else _spec(row)

    def list_jobs(self) -> list[JobSpec]:
        """Every job whose row reads; one that does not costs that job alone, with one warning naming it."""
        rows = self.read(lambda conn: conn.execute(select(jobs_table).order_by(jobs_table.c.name)).all())
        specs = []
        for row in rows:
            try:
                specs.append(_spec(row))
            except UnreadableJob as err:
                plugin_warning(f"wattwise: {err}", stacklevel=2)
        return specs

    @staticmethod
    def _runs(conn: Connection, name: str) -> list[StoredRun]:
        rows = conn.execute(select(runs_table).where(runs_table.c.job_name == name).order_by(runs_table.c.id))
        return [_run(row) for row in rows]

    @staticmethod
    def _limits(conn: Connection, name: str) -> dict[int, float]:
        rows = conn.execute(select(limits_table).where(limits_table.c.job_name == name))
        return {row.batch_size: row.power_limit_w for row in rows}

    @staticmethod
    def _lock_job(conn: Connection, name: str) -> None:
        found = conn.execute(select(jobs_table.c.name).where(jobs_table.c.name == name).with_for_update()).first()
        if found is None:
            raise unknown_job(name)

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> StoredRun:
        def work(conn: Connection) -> StoredRun:
            self._lock_job(conn, name)
            limits = self._limits(conn, name)
            batch_size, phase, cost_limit = choose(self._runs(conn, name), limits)
            run_id = conn.execute(
                insert(runs_table)
                .values(
                    job_name=name,
                    batch_size=batch_size,
                    phase=phase,
                    state="open",
                    power_limit_w=limits.get(batch_size),
                    cost_limit=cost_limit if math.isfinite(cost_limit) else None,
                    epochs=0,
                    started_at_s=now_s,
                    updated_at_s=now_s,
                )
                .returning(runs_table.c.id)
            ).scalar_one()
            return self._get_run(conn, name, run_id)

        return self.write(work)

    @staticmethod
    def _get_run(conn: Connection, name: str, run_id: int) -> StoredRun:
        row = conn.execute(select(runs_table).where(runs_table.c.job_name == name, runs_table.c.id == run_id)).first()
        if row is None:
            raise unknown_run(name, run_id)
        return _run(row)

    def _update_open(self, name: str, run_id: int, values: dict[str, Any]) -> StoredRun:
        def work(conn: Connection) -> StoredRun:
            run = self._get_run(conn, name, run_id)
            if run.finished and _same_result(run, values):
                return run  # a retried write whose first try was committed: nothing to do
            if run.finished:
                raise finished_run(name, run_id)
            if "state" in values and run.power_limit_w is None:  # a result: the limit remembered by now
                values["power_limit_w"] = self._limits(conn, name).get(run.batch_size)
            conn.execute(update(runs_table).where(runs_table.c.id == run_id).values(**values))
            return self._get_run(conn, name, run_id)

        return self.write(work)

    def get_run(self, name: str, run_id: int) -> StoredRun:
        return self.read(lambda conn: self._get_run(conn, name, run_id))

    def runs(self, name: str) -> list[StoredRun]:
        def work(conn: Connection) -> list[StoredRun]:
            if conn.execute(select(jobs_table.c.name).where(jobs_table.c.name == name)).first() is None:
                raise unknown_job(name)
            return self._runs(conn, name)

        return self.read(work)

    def least_reached_cost(self, name: str) -> float:
        least = self.read(
            lambda conn: conn.execute(
                select(func.min(runs_table.c.cost)).where(
                    runs_table.c.job_name == name, runs_table.c.state == RecurringRunState.REACHED.value
                )
            ).scalar()
        )
        return math.inf if least is None else float(least)

    @staticmethod
    def _set_limit(conn: Connection, name: str, batch_size: int, power_limit_w: float) -> None:
        key = (limits_table.c.job_name == name) & (limits_table.c.batch_size == batch_size)
        if conn.execute(update(limits_table).where(key).values(power_limit_w=power_limit_w)).rowcount == 0:
            conn.execute(insert(limits_table).values(job_name=name, batch_size=batch_size, power_limit_w=power_limit_w))

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        check_power_limit(power_limit_w)

        def work(conn: Connection) -> None:
            self._lock_job(conn, name)
            self._set_limit(conn, name, batch_size, power_limit_w)

        self.write(work)

    def power_limits(self, name: str) -> dict[int, float]:
        return self.read(lambda conn: self._limits(conn, name))

    def reset_job(self, name: str) -> bool:
        def work(conn: Connection) -> bool:
            conn.execute(delete(limits_table).where(limits_table.c.job_name == name))
            conn.execute(delete(runs_table).where(runs_table.c.job_name == name))
            return bool(conn.execute(delete(jobs_table).where(jobs_table.c.name == name)).rowcount)

        return self.write(work)

    def close(self) -> None:
        self._engine.dispose()
