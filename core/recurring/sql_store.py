"""`SqlJobStore`: the store on SQLAlchemy (a SQLite file by default, PostgreSQL by URL).

One database holds recurring jobs, their runs and remembered power limits (`wattwise.recurring.schema`);
opening it upgrades its schema first (`wattwise.recurring.migrations`, Alembic). Besides the `JobStore`
methods, `write` and `read` run other work on the same tables with the same safety
(`wattwise.limits_memory` uses them).

SQLite: WAL journal (readers never block the writer), a busy timeout, and every write transaction
begun IMMEDIATE, so that a writer takes the lock before reading what it will update and two writers
never deadlock on a lock upgrade; a new file and its folder are created readable by their owner only.
PostgreSQL: `start_run` locks the job's row, so two processes starting runs of one job decide one after
the other. On both, a write that still meets a lock or a serialization failure is retried with a
growing, jittered back-off until `lock_timeout_s` runs out.
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
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
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, OperationalError
from sqlalchemy.pool import StaticPool

from wattwise.errors import UsageError
from wattwise.recurring.migrations import upgrade
from wattwise.recurring.schema import jobs_table, limits_table, runs_table
from wattwise.recurring.spec import JobSpec, RunRecord
from wattwise.recurring.store import ChooseFn, check_same_spec, finished_run, unknown_job, unknown_run

T = TypeVar("T")

#: PostgreSQL SQLSTATEs worth retrying: serialization failure, deadlock, lock not available.
_PG_RETRY_STATES = frozenset({"40001", "40P01", "55P03"})


def _retryable(err: DBAPIError) -> bool:
    if isinstance(err.orig, sqlite3.OperationalError):
        message = str(err.orig).lower()
        return "locked" in message or "busy" in message
    return getattr(err.orig, "sqlstate", None) in _PG_RETRY_STATES


def _spec_row(spec: JobSpec, now_s: float) -> dict[str, Any]:
    return {
        "name": spec.name,
        "batch_sizes": json.dumps(list(spec.batch_sizes)),
        "default_batch_size": spec.default_batch_size,
        "target_metric": spec.target_metric,
        "metric_mode": spec.metric_mode,
        "max_epochs": spec.max_epochs,
        "max_power_w": spec.max_power_w,
        "eta": spec.eta,
        "beta": spec.beta,
        "created_at_s": now_s,
    }


def _spec(row: Row[Any]) -> JobSpec:
    return JobSpec(
        name=row.name,
        batch_sizes=tuple(json.loads(row.batch_sizes)),
        default_batch_size=row.default_batch_size,
        target_metric=row.target_metric,
        metric_mode="min" if row.metric_mode == "min" else "max",
        max_epochs=row.max_epochs,
        max_power_w=row.max_power_w,
        eta=row.eta,
        beta=row.beta,
    )


def _run(row: Row[Any]) -> RunRecord:
    return RunRecord(
        run_id=row.id,
        batch_size=row.batch_size,
        phase=row.phase,
        state=row.state,
        started_at_s=row.started_at_s,
        updated_at_s=row.updated_at_s,
        power_limit_w=row.power_limit_w,
        cost_limit=math.inf if row.cost_limit is None else row.cost_limit,
        epochs=row.epochs,
        energy_j=row.energy_j,
        time_s=row.time_s,
        cost=row.cost,
    )


def _on_sqlite_connect(busy_timeout_s: float, file_backed: bool) -> Callable[[Any, Any], None]:
    def configure(dbapi_connection: Any, _record: Any) -> None:
        # SQLAlchemy's "begin" hook below emits BEGIN; the driver must not start transactions itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if file_backed:
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
    """Create a missing SQLite file (and its folder) for its owner only; SQLite gives its WAL the same mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def make_engine(url: str, *, busy_timeout_s: float = 30.0) -> Engine:
    """An engine for `url`, with SQLite's WAL, busy timeout and IMMEDIATE write transactions."""
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise UsageError(f"store URL {url!r} is not a database URL; give a SQLite file path or a URL") from err
    try:
        if parsed.get_backend_name() != "sqlite":
            return create_engine(parsed, pool_pre_ping=True)
        database = parsed.database or ""
        file_backed = database not in ("", ":memory:")
        if file_backed:
            _create_private_file(Path(database).expanduser())
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
    event.listen(engine, "connect", _on_sqlite_connect(busy_timeout_s, file_backed))
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


class SqlJobStore:
    """A `JobStore` in a SQL database; see the module docstring for how writers stay safe."""

    def __init__(self, url: str, *, lock_timeout_s: float = 120.0) -> None:
        self.url = url
        self._engine = make_engine(url)
        self._writer = self._engine.execution_options(wattwise_write=True)
        self._lock_timeout_s = lock_timeout_s
        try:
            self.write(upgrade)
        except OperationalError as err:
            reason = " ".join(str(err.orig).split())
            raise UsageError(f"cannot open the job store {self.describe()}: {reason}") from err

    def describe(self) -> str:
        """The store's URL with any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    def _retrying(self, engine: Engine, work: Callable[[Connection], T]) -> T:
        deadline = time.monotonic() + self._lock_timeout_s
        delay_s = 0.005
        while True:
            try:
                with engine.begin() as conn:
                    return work(conn)
            except DBAPIError as err:
                if not _retryable(err) or time.monotonic() + delay_s > deadline:
                    raise
                time.sleep(delay_s * (0.5 + random.random()))
                delay_s = min(delay_s * 2, 0.5)

    def write(self, work: Callable[[Connection], T]) -> T:
        """`work` in one write transaction (SQLite: begun IMMEDIATE), retried while the store is locked."""
        return self._retrying(self._writer, work)

    def read(self, work: Callable[[Connection], T]) -> T:
        """`work` in one read transaction, retried while the store is locked."""
        return self._retrying(self._engine, work)

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
        rows = self.read(lambda conn: conn.execute(select(jobs_table).order_by(jobs_table.c.name)).all())
        return [_spec(row) for row in rows]

    @staticmethod
    def _runs(conn: Connection, name: str) -> list[RunRecord]:
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

    def start_run(self, name: str, choose: ChooseFn, now_s: float) -> RunRecord:
        def work(conn: Connection) -> RunRecord:
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
    def _get_run(conn: Connection, name: str, run_id: int) -> RunRecord:
        row = conn.execute(select(runs_table).where(runs_table.c.job_name == name, runs_table.c.id == run_id)).first()
        if row is None:
            raise unknown_run(name, run_id)
        return _run(row)

    def _update_open(self, name: str, run_id: int, values: dict[str, Any]) -> RunRecord:
        def work(conn: Connection) -> RunRecord:
            run = self._get_run(conn, name, run_id)
            if run.finished:
                raise finished_run(name, run_id)
            if values.get("state", "open") != "open" and run.power_limit_w is None:
                values["power_limit_w"] = self._limits(conn, name).get(run.batch_size)
            conn.execute(update(runs_table).where(runs_table.c.id == run_id).values(**values))
            return self._get_run(conn, name, run_id)

        return self.write(work)

    def progress_run(
        self, name: str, run_id: int, *, epochs: int, energy_j: float, time_s: float, cost: float, now_s: float
    ) -> None:
        self._update_open(
            name,
            run_id,
            {"epochs": epochs, "energy_j": energy_j, "time_s": time_s, "cost": cost, "updated_at_s": now_s},
        )

    def finish_run(
        self,
        name: str,
        run_id: int,
        *,
        reached: bool,
        epochs: int,
        energy_j: float,
        time_s: float,
        cost: float,
        now_s: float,
    ) -> RunRecord:
        return self._update_open(
            name,
            run_id,
            {
                "state": "reached" if reached else "failed",
                "epochs": epochs,
                "energy_j": energy_j,
                "time_s": time_s,
                "cost": cost,
                "updated_at_s": now_s,
            },
        )

    def get_run(self, name: str, run_id: int) -> RunRecord:
        return self.read(lambda conn: self._get_run(conn, name, run_id))

    def runs(self, name: str) -> list[RunRecord]:
        def work(conn: Connection) -> list[RunRecord]:
            if conn.execute(select(jobs_table.c.name).where(jobs_table.c.name == name)).first() is None:
                raise unknown_job(name)
            return self._runs(conn, name)

        return self.read(work)

    def least_reached_cost(self, name: str) -> float:
        least = self.read(
            lambda conn: conn.execute(
                select(func.min(runs_table.c.cost)).where(
                    runs_table.c.job_name == name, runs_table.c.state == "reached"
                )
            ).scalar()
        )
        return math.inf if least is None else float(least)

    def set_power_limit(self, name: str, batch_size: int, power_limit_w: float) -> None:
        def work(conn: Connection) -> None:
            self._lock_job(conn, name)
            key = (limits_table.c.job_name == name) & (limits_table.c.batch_size == batch_size)
            if conn.execute(update(limits_table).where(key).values(power_limit_w=power_limit_w)).rowcount == 0:
                conn.execute(
                    insert(limits_table).values(job_name=name, batch_size=batch_size, power_limit_w=power_limit_w)
                )

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
