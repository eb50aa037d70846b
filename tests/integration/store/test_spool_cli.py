"""What a user sees from `wattwise jobs sync` and `jobs show` after a spool file with wrong types (issue 26):
exit 0, one warning line naming the file and the field, no traceback; the other results delivered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.store import spool, store_url
from wattwise.store.sql import SqlJobStore

SPEC = JobSpec(
    name="bert/squad", batch_sizes=(16, 32), default_batch_size=32, target_metric=0.8, max_epochs=5, max_power_w=300.0
)


def wattwise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wattwise", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=os.environ.copy(),
    )


def test_jobs_sync_and_show_exit_0_with_one_warning_line_after_a_spool_file_with_wrong_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, path = tmp_path / "home", tmp_path / "jobs.sqlite"
    monkeypatch.setenv("WATTWISE_HOME", str(home))  # the spool folder the commands read
    url = store_url(str(path))
    store = SqlJobStore(url)
    optimizer = BatchSizeOptimizer(SPEC, store)
    bad_run, good_run = optimizer.next_batch_size(), optimizer.next_batch_size()
    store.close()
    files = [
        spool.spool_result(
            url,
            spool.SpooledResult(
                job=SPEC.name,
                run_id=run.run_id,
                reached=False,
                epochs=1,
                energy_j=100.0,
                time_s=1.0,
                cost=200.0,
                now_s=time.time(),
            ),
        )
        for run in (bad_run, good_run)
    ]
    data = json.loads(files[0].read_text())
    data.update(energy_j="1e3", cost=[])
    files[0].write_text(json.dumps(data))

    sync = wattwise("jobs", "sync", "--store", str(path))
    assert sync.returncode == 0, sync.stderr
    assert sync.stdout == f"delivered 1 spooled results to {url}; 1 set aside, 0 still pending\n"
    [line] = sync.stderr.splitlines()
    assert line.startswith(f"EnergyPluginWarning: wattwise: the spooled result {files[0]} was not delivered")
    assert "energy_j must be a number, between 0 and 1e+15 J (got '1e3', a str)" in line
    assert line.endswith(f"it is kept as {files[0]}.rejected")

    show = wattwise("jobs", "show", SPEC.name, "--store", str(path), "--json")
    assert show.returncode == 0 and show.stderr == ""
    runs = {run["run_id"]: run for run in json.loads(show.stdout)["runs"]}
    assert (runs[good_run.run_id]["state"], runs[bad_run.run_id]["state"]) == ("failed", "open")
