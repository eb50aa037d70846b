"""A store that goes away while a recurring run records its result: a real PostgreSQL server, stopped and
started by the tests (their own server: the session one stays up for the other tests), and a locked
SQLite file. The result is spooled, delivered once at the next contact or by `wattwise jobs sync`."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.support.postgres_server import _pg_binaries, _server_user, empty_database, postgres_server
from wattwise.distributed import Collective
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.run import EnergyPluginWarning, Run
from wattwise.run.recurring import RecurringJobRun
from wattwise.store import spool, store_url
from wattwise.store.spool import StoreUnavailable
from wattwise.store.sql import SqlJobStore

SPEC = JobSpec(
    name="outage/job",
    batch_sizes=(16, 32, 64),
    default_batch_size=32,
    target_metric=0.8,
    max_epochs=5,
    max_power_w=300.0,
)
WATTWISE = Path(sys.executable).with_name("wattwise")


class Server:
    """A PostgreSQL server of this module's own, which the tests stop and start."""

    def __init__(self, url: str) -> None:
        self.url = store_url(url)
        query = parse_qs(urlsplit(url).query)
        self.root, self.port = Path(query["host"][0]), query["port"][0]
        binaries = _pg_binaries()
        assert binaries is not None
        self.pg_ctl = binaries[1]

    def _pg_ctl(self, *args: str) -> None:
        done = subprocess.run(
            [self.pg_ctl, "-D", str(self.root / "data"), *args],
            user=_server_user(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def stop(self) -> None:
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def start(self) -> None:
        options = f"-k {self.root} -p {self.port} -c listen_addresses='' -c fsync=off"
        self._pg_ctl("-o", options, "-l", str(self.root / "log"), "-w", "-t", "60", "start")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with postgres_server() as url:
        yield Server(url)


@pytest.fixture
def pg(server: Server) -> Iterator[Server]:
    """The module's server, up, with every table dropped; up again after the test whatever it did."""
    empty_database(server.url)
    yield server
    with contextlib.suppress(AssertionError):  # it was up
        server.start()


def _sync(url: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(WATTWISE), "jobs", "sync", "--store", url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    return cast(dict[str, Any], json.loads(done.stdout))


def _spool_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "spooled to" in str(w.message)]


def test_result_recorded_while_postgresql_is_stopped_is_spooled_then_synced_once(pg: Server) -> None:
    store = SqlJobStore(pg.url, reconnect_s=1.0)
    optimizer = BatchSizeOptimizer(SPEC, store)
    rec = optimizer.next_batch_size()
    assert optimizer.should_stop(rec.run_id, 1, 1000.0, 10.0, metric=0.5) is False
    pg.stop()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Training goes on without the store (one warning), and its result is spooled (one warning).
        assert optimizer.should_stop(rec.run_id, 2, 2000.0, 20.0, metric=0.9) is True
        assert optimizer.should_stop(rec.run_id, 3, 3000.0, 30.0, metric=0.9) is True
        result = optimizer.report_result(
            rec.run_id, energy_j=2000.0, time_s=20.0, reached=True, epochs=2, power_limit_w=210.0
        )
    assert result is None
    assert all(issubclass(w.category, EnergyPluginWarning) for w in caught)
    assert len(caught) == 2
    [spooled] = _spool_warnings(caught)
    [path] = spool.pending(pg.url)
    assert str(path) in spooled and "wattwise jobs sync" in spooled
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    store.close()

    pg.start()
    assert _sync(pg.url) | {"store": None} == {"store": None, "delivered": 1, "rejected": 0, "pending": 0}
    assert spool.pending(pg.url) == []
    store = SqlJobStore(pg.url)
    [run] = store.runs(SPEC.name)
    assert (run.run_id, run.state, run.epochs, run.energy_j, run.time_s) == (rec.run_id, "reached", 2, 2000.0, 20.0)
    assert run.cost == SPEC.cost(2000.0, 20.0)
    assert store.power_limits(SPEC.name) == {rec.batch_size: 210.0}
    assert run.power_limit_w == 210.0

    # Syncing again changes nothing; the same result delivered twice (another copy, another process
    # that had spooled it too) is recorded once: the run already has its result.
    assert _sync(pg.url) | {"store": None} == {"store": None, "delivered": 0, "rejected": 0, "pending": 0}
    again = spool.spool_result(pg.url, _result(rec.run_id, energy_j=9999.0))
    assert spool.pending(pg.url) == [again]
    SqlJobStore(pg.url).close()  # the next open delivers first
    assert spool.pending(pg.url) == []
    assert store.runs(SPEC.name) == [run]
    store.close()


def _result(run_id: int, *, energy_j: float) -> spool.SpooledResult:
    return spool.SpooledResult(
        job=SPEC.name,
        run_id=run_id,
        reached=False,
        epochs=1,
        energy_j=energy_j,
        time_s=1.0,
        cost=SPEC.cost(energy_j, 1.0),
        now_s=time.time(),
    )


def test_postgresql_restarted_within_3_s_during_the_write_is_waited_for(pg: Server) -> None:
    store = SqlJobStore(pg.url)
    optimizer = BatchSizeOptimizer(SPEC, store)
    rec = optimizer.next_batch_size()
    pg.stop()
    restart = threading.Timer(1.5, pg.start)
    restart.start()
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = optimizer.report_result(rec.run_id, energy_j=500.0, time_s=5.0, reached=False, epochs=1)
    restart.join()
    assert time.monotonic() - started < 6.0
    assert result is not None and result.state == "failed" and result.energy_j == 500.0
    assert spool.pending(pg.url) == []
    store.close()


def test_a_run_cannot_start_while_the_store_is_down_and_says_so_in_one_line(pg: Server) -> None:
    pg.stop()
    job_run = RecurringJobRun(SPEC, store=pg.url, collective=Collective())
    with pytest.raises(StoreUnavailable) as raised:
        job_run.begin(cast(Run, None))  # the store is asked before the run is steered
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("cannot open the job store postgresql+psycopg://postgres@/postgres")
    assert "needs its store to choose this run's batch size" in message
    assert spool.pending(pg.url) == []


def test_result_for_a_locked_sqlite_store_is_spooled_and_delivered_at_the_next_open(tmp_path: Path) -> None:
    url = store_url(str(tmp_path / "jobs.sqlite"))
    store = SqlJobStore(url, lock_timeout_s=0.5)
    optimizer = BatchSizeOptimizer(SPEC, store)
    rec = optimizer.next_batch_size()
    locker = sqlite3.connect(tmp_path / "jobs.sqlite", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    with pytest.warns(EnergyPluginWarning, match="spooled to"):
        result = optimizer.report_result(rec.run_id, energy_j=700.0, time_s=7.0, reached=False, epochs=1)
    assert result is None and len(spool.pending(url)) == 1
    locker.execute("ROLLBACK")
    locker.close()
    store.close()
    store = SqlJobStore(url)
    assert spool.pending(url) == []
    [run] = store.runs(SPEC.name)
    assert (run.state, run.energy_j, run.epochs) == ("failed", 700.0, 1)
    store.close()


def test_a_spooled_result_for_a_forgotten_job_is_set_aside_with_a_warning(tmp_path: Path) -> None:
    url = store_url(str(tmp_path / "jobs.sqlite"))
    SqlJobStore(url).close()
    path = spool.spool_result(url, _result(7, energy_j=1.0))
    with pytest.warns(UserWarning, match="no job named"):
        SqlJobStore(url).close()
    assert spool.pending(url) == []
    assert path.with_name(path.name + ".rejected").exists()
