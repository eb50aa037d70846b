"""Issue 26's spool attack, replayed with a real ordinary user: in a shared `WATTWISE_HOME` uid 54321 spools a
forged result for root's store (its job's remembered limit to 100 W) and a link to a file only root may read;
root's `wattwise jobs sync` delivers neither, says so in one line and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.ordinary_user import USER_GID, USER_UID, run_as, shared_folder, why_not
from wattwise.errors import EnergyPluginWarning
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec
from wattwise.store import spool, store_url
from wattwise.store.sql import SqlJobStore

pytestmark = pytest.mark.skipif(why_not() is not None, reason=f"runs a command as another user: {why_not()}")

SPEC = JobSpec(
    name="nightly", batch_sizes=(16, 32), default_batch_size=32, target_metric=0.8, max_epochs=5, max_power_w=300.0
)

#: What the other user runs: spool a result for run argv[2] of root's store argv[1] (100 W remembered), and link
#: argv[3] (a root-only file) into the same spool folder.
FORGE = """
import os, sys, time
from wattwise.store import spool
url, run_id, secret = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spool.spool_result(url, spool.SpooledResult(job="nightly", run_id=run_id, reached=True, epochs=1, energy_j=1.0,
                                            time_s=1.0, cost=1.0, now_s=time.time(), power_limit_w=100.0))
os.symlink(secret, spool.spool_dir(url) / "00000000000000000000-run1.json")
"""


def test_another_users_spool_files_never_reach_roots_store(monkeypatch: pytest.MonkeyPatch) -> None:
    with shared_folder("wattwise-shared-home-") as base:
        home = base / "home"
        home.mkdir(mode=0o1777)
        home.chmod(0o1777)  # a WATTWISE_HOME every user of the node writes to
        monkeypatch.setenv("WATTWISE_HOME", str(home))
        url = store_url(str(base / "jobs.sqlite"))
        store = SqlJobStore(url)
        optimizer = BatchSizeOptimizer(SPEC, store)
        run = optimizer.next_batch_size()
        store.set_power_limit(SPEC.name, run.batch_size, 250.0)
        store.close()
        secret = base / "root-only.json"
        secret.write_text(
            spool.SpooledResult(
                job=SPEC.name,
                run_id=run.run_id,
                reached=True,
                epochs=1,
                energy_j=2.0,
                time_s=1.0,
                cost=2.0,
                now_s=time.time(),
            ).to_json()
        )
        secret.chmod(0o600)

        forged = run_as(
            USER_UID, USER_GID, ["-c", FORGE, url, str(run.run_id), str(secret)], env={"WATTWISE_HOME": str(home)}
        )
        assert forged.returncode == 0, forged.stderr
        assert len(spool.not_yours(url)) == 2 and spool.pending(url) == []

        sync = subprocess.run(
            [sys.executable, "-m", "wattwise", "jobs", "sync", "--store", url, "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=os.environ.copy(),
        )
        assert sync.returncode == 0, sync.stderr
        assert json.loads(sync.stdout) | {"store": None} == {"store": None, "delivered": 0, "rejected": 0, "pending": 0}
        [line] = sync.stderr.splitlines()
        assert f"2 spooled result(s) in {spool.spool_dir(url)} belong to another user (uid {USER_UID})" in line

        with pytest.warns(EnergyPluginWarning, match="belong to another user"):  # each open names them again
            store = SqlJobStore(url)
        try:
            assert store.get_run(SPEC.name, run.run_id).state == "open"
            assert store.power_limits(SPEC.name) == {run.batch_size: 250.0}
        finally:
            store.close()
        assert [p.name for p in Path(spool.spool_dir(url)).iterdir() if p.suffix == ".rejected"] == []
