"""The job store on SQLite and on a real PostgreSQL server: concurrent writers lose nothing, WAL, bad URLs.

What every store answers alike (in memory too): test_store_contract.py. Its schema migrations:
test_store_migrations.py."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from tests.support.stores import SHARED_JOB
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.store.sql import SqlJobStore

PROCESSES = 8
RESULTS_PER_PROCESS = 50


def _worker(url: str, index: int, results: int, start: Any) -> list[int]:
    """One training process: `results` runs of the shared job, each reported; returns its run ids.

    `start` is a barrier: every process opens the store and registers the job at the same moment.
    """
    start.wait(timeout=120)
    store = SqlJobStore(url)
    optimizer = BatchSizeOptimizer(SHARED_JOB, store)
    ids = []
    for step in range(results):
        recommendation = optimizer.next_batch_size()
        if recommendation.power_limit_w is None:
            optimizer.remember_power_limit(recommendation.batch_size, 200.0 + index)
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
    runs = store.runs(SHARED_JOB.name)
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


@pytest.mark.timeout(300)
def test_sqlite_8_processes_x_50_results_all_kept(sqlite_url: str) -> None:
    _concurrent_writers_lose_nothing(sqlite_url)


@pytest.mark.timeout(300)
def test_postgresql_8_processes_x_50_results_all_kept(fresh_postgres: str) -> None:
    _concurrent_writers_lose_nothing(fresh_postgres)
