"""The job store on SQLite and on a real PostgreSQL server: concurrent writers lose nothing, schema
migrations, and the store's answers."""

from __future__ import annotations

import glob
import multiprocessing
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from wattwise.errors import UsageError
from wattwise.recurring.migrations import LATEST_VERSION, VERSION_TABLE
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.recurring.sql_store import SqlJobStore, metadata
from wattwise.recurring.store import store_url

PROCESSES = 8
RESULTS_PER_PROCESS = 50

SPEC = JobSpec(
    name="shared/job",
    batch_sizes=(16, 32, 64, 128),
    default_batch_size=64,
    target_metric=0.8,
    max_epochs=5,
    max_power_w=300.0,
)


def _pg_binaries() -> tuple[str, str] | None:
    """initdb and pg_ctl from PATH, else the newest /usr/lib/postgresql/*/bin (Debian's package)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(f"{bindir}/initdb", os.X_OK) and os.access(f"{bindir}/pg_ctl", os.X_OK):
            return f"{bindir}/initdb", f"{bindir}/pg_ctl"
    return None


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, run it as `postgres` (or `nobody`)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.skip("running as root and no 'postgres' or 'nobody' user to run a PostgreSQL server as")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server on a unix socket in a temporary directory, stopped at the end."""
    binaries = _pg_binaries()
    if binaries is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin; "
            "install the `postgresql` package to run the PostgreSQL store tests"
        )
    initdb, pg_ctl = binaries
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="wattwise-pg-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, port = root / "data", _free_port()

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, user=user, capture_output=True, text=True, timeout=120, check=False)

    done = run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {done.stderr.strip()}")
    options = f"-k {root} -p {port} -c listen_addresses='' -c fsync=off"
    start = [pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "-t", "60", "start"]
    done = run(start)
    if done.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {done.stderr.strip()} {log[-2000:]}")
    try:
        yield f"postgresql://postgres@/postgres?host={root}&port={port}"
    finally:
        run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "-t", "60", "stop"])
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh_postgres(postgres_url: str) -> Iterator[str]:
    """The server with the wattwise tables dropped before the test."""
    store = SqlJobStore(store_url(postgres_url))
    with store._writer.begin() as conn:
        metadata.drop_all(conn)
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {VERSION_TABLE}")
    store.close()
    yield store_url(postgres_url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return store_url(str(tmp_path / "state" / "jobs.sqlite"))


def _worker(url: str, index: int, results: int, start: Any) -> list[int]:
    """One training process: `results` runs of the shared job, each reported; returns its run ids.

    `start` is a barrier: every process opens the store and registers the job at the same moment.
    """
    start.wait(timeout=120)
    store = SqlJobStore(url)
    optimizer = BatchSizeOptimizer(SPEC, store)
    ids = []
    for step in range(results):
        recommendation = optimizer.next_batch_size()
        if recommendation.power_limit_w is None:
            optimizer.record_power_limit(recommendation.batch_size, 200.0 + index)
        energy_j, time_s = 1000.0 + index + step, 10.0
        optimizer.should_stop(recommendation.run_id, 1, energy_j, time_s, metric=0.9)
        optimizer.report_result(recommendation.run_id, energy_j=energy_j, time_s=time_s, reached=True)
        ids.append(recommendation.run_id)
    store.close()
    return ids


def _concurrent_writers_lose_nothing(url: str) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(PROCESSES) as pool:
        start = manager.Barrier(PROCESSES)
        jobs = [pool.apply_async(_worker, (url, i, RESULTS_PER_PROCESS, start)) for i in range(PROCESSES)]
        returned = [job.get(timeout=240) for job in jobs]
    ids = [run_id for chunk in returned for run_id in chunk]
    assert len(ids) == len(set(ids)) == PROCESSES * RESULTS_PER_PROCESS
    store = SqlJobStore(url)
    runs = store.runs(SPEC.name)
    store.close()
    assert len(runs) == PROCESSES * RESULTS_PER_PROCESS
    assert {r.run_id for r in runs} == set(ids)
    assert all(r.state == "reached" and r.epochs == 1 and r.cost is not None for r in runs)
    # Choosing and inserting a run is atomic: every batch size was explored exactly once although
    # eight processes asked at once (the others got the best choice so far, or the bandit's).
    assert sorted(r.batch_size for r in runs if r.phase == "explore") == [16, 32, 64, 128]
    # Every result written is the one its process reported.
    assert sorted(r.energy_j or 0.0 for r in runs) == sorted(
        1000.0 + i + step for i in range(PROCESSES) for step in range(RESULTS_PER_PROCESS)
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sqlite_8_processes_x_50_results_all_kept(sqlite_url: str) -> None:
    _concurrent_writers_lose_nothing(sqlite_url)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_postgresql_8_processes_x_50_results_all_kept(fresh_postgres: str) -> None:
    _concurrent_writers_lose_nothing(fresh_postgres)


def _migrated_schema(url: str) -> dict[str, set[str]]:
    store = SqlJobStore(url)
    with store.connection() as conn:
        inspector = inspect(conn)
        tables = {t: {c["name"] for c in inspector.get_columns(t)} for t in inspector.get_table_names()}
    store.close()
    return tables


def _check_migrations_build_the_current_schema(url: str) -> None:
    tables = _migrated_schema(url)
    expected = {table.name: {c.name for c in table.columns} for table in metadata.sorted_tables}
    assert {name: cols for name, cols in tables.items() if name != VERSION_TABLE} == expected
    # Opening again migrates nothing and keeps the data.
    store = SqlJobStore(url)
    store.register_job(SPEC, 1.0)
    store.close()
    store = SqlJobStore(url)
    assert store.get_job(SPEC.name) == SPEC
    with store.connection() as conn:
        assert conn.exec_driver_sql(f"SELECT version FROM {VERSION_TABLE}").scalar() == LATEST_VERSION
    store.close()


def test_sqlite_migrations_build_the_current_schema(sqlite_url: str) -> None:
    _check_migrations_build_the_current_schema(sqlite_url)


def test_postgresql_migrations_build_the_current_schema(fresh_postgres: str) -> None:
    _check_migrations_build_the_current_schema(fresh_postgres)


def test_sqlite_store_uses_wal(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    with store.connection() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    store.close()


def test_store_written_by_a_newer_wattwise_is_refused(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    with store._writer.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {VERSION_TABLE} SET version = {LATEST_VERSION + 1}")
    store.close()
    with pytest.raises(UsageError, match="newer than this wattwise"):
        SqlJobStore(sqlite_url)


def test_store_round_trip_and_reset(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    store.register_job(SPEC, 0.0)
    run = store.start_run(SPEC.name, lambda runs, limits: (32, "explore", float("inf")), 5.0)
    assert (run.batch_size, run.phase, run.state, run.power_limit_w) == (32, "explore", "open", None)
    store.set_power_limit(SPEC.name, 32, 175.0)
    store.progress_run(SPEC.name, run.run_id, epochs=1, energy_j=10.0, time_s=1.0, cost=155.0, now_s=6.0)
    done = store.finish_run(
        SPEC.name, run.run_id, reached=True, epochs=2, energy_j=20.0, time_s=2.0, cost=310.0, now_s=7.0
    )
    assert (done.state, done.power_limit_w, done.epochs, done.cost, done.updated_at_s) == (
        "reached",
        175.0,
        2,
        310.0,
        7.0,
    )
    assert store.least_reached_cost(SPEC.name) == 310.0
    assert store.power_limits(SPEC.name) == {32: 175.0}
    with pytest.raises(UsageError, match="already finished"):
        store.finish_run(SPEC.name, run.run_id, reached=True, epochs=2, energy_j=1, time_s=1, cost=1, now_s=8)
    with pytest.raises(UsageError, match="has no run 999"):
        store.get_run(SPEC.name, 999)
    assert store.reset_job(SPEC.name) is True
    assert store.get_job(SPEC.name) is None and store.reset_job(SPEC.name) is False
    with pytest.raises(UsageError, match="no job named"):
        store.runs(SPEC.name)
    store.close()


def test_registering_a_job_again_with_other_settings_names_the_fields(sqlite_url: str) -> None:
    store = SqlJobStore(sqlite_url)
    store.register_job(SPEC, 0.0)
    store.register_job(SPEC, 1.0)
    changed = JobSpec(**{**SPEC.__dict__, "max_epochs": 9, "beta": 3.0})
    with pytest.raises(UsageError, match=r"max_epochs \(stored 5, given 9\).*beta.*jobs reset"):
        store.register_job(changed, 2.0)
    store.close()


def test_bad_store_urls_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no driver"):
        SqlJobStore("nosuchdb://x/y")
    with pytest.raises(UsageError, match="cannot open the job store"):
        SqlJobStore(f"postgresql+psycopg://nobody@/db?host={tmp_path}&port=1")
    assert store_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert store_url(str(tmp_path / "x.sqlite")) == f"sqlite:///{tmp_path / 'x.sqlite'}"
