"""The outage spool delivers only what the running user spooled, and only results a run could give (issue 26).

In a shared `WATTWISE_HOME` the spool folder's name is a hash anyone can compute, so anyone can put files
there. Each test spools two results the way a run does (`spool_result`), spoils one of them (wrong types,
figures no run has, another user's file, a link to a root-only file), and checks that the other is delivered,
the spoiled one is not, and one warning names the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ordinary_user import IS_ROOT, OTHER_UID, USER_GID
from wattwise.cli.main import main
from wattwise.errors import EnergyPluginWarning, UsageError
from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.spec import JobSpec, StoredRun
from wattwise.store import spool, store_url
from wattwise.store.memory import MemoryJobStore
from wattwise.store.sql import SqlJobStore

SPEC = JobSpec(
    name="bert/squad", batch_sizes=(16, 32), default_batch_size=32, target_metric=0.8, max_epochs=5, max_power_w=300.0
)
ROOT_ONLY = "root-only: never read\n"
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to give a file to another user (os.chown)")


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


class Spooled:
    """A store with two open runs of SPEC, and a result of each spooled as a run spools it."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "jobs.sqlite"
        self.url = store_url(str(self.path))
        store = SqlJobStore(self.url)
        optimizer = BatchSizeOptimizer(SPEC, store)
        self.bad_run, self.good_run = optimizer.next_batch_size(), optimizer.next_batch_size()
        store.set_power_limit(SPEC.name, self.bad_run.batch_size, 250.0)
        store.close()
        self.bad = spool.spool_result(self.url, self.result(self.bad_run, energy_j=400.0, power_limit_w=200.0))
        self.good = spool.spool_result(self.url, self.result(self.good_run, energy_j=500.0))

    @staticmethod
    def result(run: StoredRun, *, energy_j: float, power_limit_w: float | None = None) -> spool.SpooledResult:
        return spool.SpooledResult(
            job=SPEC.name,
            run_id=run.run_id,
            reached=False,
            epochs=2,
            energy_j=energy_j,
            time_s=4.0,
            cost=SPEC.cost(energy_j, 4.0),
            now_s=time.time(),
            power_limit_w=power_limit_w,
        )

    def spoil(self, **fields: Any) -> None:
        """Rewrite the bad run's file in place (same owner, same mode) with `fields` changed."""
        data = json.loads(self.bad.read_text())
        data.update(fields)
        self.bad.write_text(json.dumps(data))

    def open(self) -> SqlJobStore:
        return SqlJobStore(self.url)

    def runs(self) -> dict[int, StoredRun]:
        store = self.open()
        try:
            return {run.run_id: run for run in store.runs(SPEC.name)}
        finally:
            store.close()

    def limits(self) -> dict[int, float]:
        store = self.open()
        try:
            return store.power_limits(SPEC.name)
        finally:
            store.close()

    def check_only_the_good_one_was_delivered(self) -> None:
        runs = self.runs()
        assert (runs[self.good_run.run_id].state, runs[self.good_run.run_id].energy_j) == ("failed", 500.0)
        assert runs[self.bad_run.run_id].state == "open" and runs[self.bad_run.run_id].energy_j is None
        assert self.limits() == {self.bad_run.batch_size: 250.0}  # the spoiled file's 200 W was not remembered


@pytest.fixture
def spooled(tmp_path: Path) -> Spooled:
    return Spooled(tmp_path)


def delivery_warnings(spooled: Spooled) -> list[str]:
    """Open the store (which delivers the spool); the warnings it gave."""
    with pytest.warns(EnergyPluginWarning) as caught:
        spooled.open().close()
    return [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]  # not a stray GC notice


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"energy_j": "1e3"}, r"energy_j must be a number, between 0 and 1e\+15 J \(got '1e3', a str\)"),
        ({"cost": []}, r"cost must be a number, .* \(got \[\], a list\)"),
        ({"energy_j": math.nan}, r"energy_j must be between 0 and 1e\+15 J \(got nan\)"),
        ({"energy_j": -1.0}, r"energy_j must be between 0 and 1e\+15 J \(got -1.0\)"),
        ({"cost": -5.0}, r"cost must be between 0 and"),
        ({"epochs": -1}, r"epochs must be an integer from 0 to 2147483647 \(got -1\)"),
        ({"epochs": 1.5}, r"epochs must be an integer"),
        ({"time_s": -2.0}, r"time_s must be between 0 and 1e\+09 s"),
        ({"time_s": math.inf}, r"time_s must be between 0 and 1e\+09 s \(got inf\)"),
        ({"power_limit_w": 1e9}, r"power_limit_w must be above 0 and at most 5000 W \(got 1000000000.0\)"),
        ({"power_limit_w": -50}, r"power_limit_w must be above 0 and at most 5000 W \(got -50\)"),
        ({"power_limit_w": "100"}, r"power_limit_w must be a number"),
        ({"now_s": None}, r"now_s must be a number"),
        ({"reached": "yes"}, r"reached must be true or false \(got 'yes'\)"),
        ({"reached": True, "epochs": 0}, r"epochs must be at least 1 for a run that reached the target"),
        ({"run_id": "1"}, r"run_id must be an integer"),
        ({"run_id": 2**40}, r"run_id must be an integer from 1 to 2147483647"),
        ({"job": 5}, r"job: 5 is not a valid name"),
        ({"job": "../etc"}, r"job: '\.\./etc' is not a valid name"),
        ({"version": 2}, r"version must be 1 \(got 2\)"),
        ({"version": True}, r"version must be 1 \(got True\)"),
        ({"owner": "root"}, r"owner is not a field of a spooled result"),
    ],
)
def test_a_spooled_result_with_a_field_no_run_gives_is_set_aside_naming_it_and_the_rest_is_delivered(
    spooled: Spooled, fields: dict[str, Any], named: str
) -> None:
    spooled.spoil(**fields)
    [warning] = delivery_warnings(spooled)
    assert str(spooled.bad) in warning and "was not delivered" in warning
    assert f"kept as {spooled.bad}.rejected" in warning
    assert re.search(named, warning), warning
    assert spool.pending(spooled.url) == [] and spool.rejected(spooled.url) == [Path(f"{spooled.bad}.rejected")]
    spooled.check_only_the_good_one_was_delivered()


def test_a_spooled_result_missing_a_field_names_it(spooled: Spooled) -> None:
    data = json.loads(spooled.bad.read_text())
    del data["energy_j"]
    spooled.bad.write_text(json.dumps(data))
    [warning] = delivery_warnings(spooled)
    assert "energy_j is missing" in warning
    spooled.check_only_the_good_one_was_delivered()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"[" * 60_000, "nested too deeply"),
        (b"[1, 2]", "not a JSON object (a list)"),
        (b'{"version": 1, "job": ', "not JSON"),
        (b"\xff\xfe binary", "not UTF-8 text"),
        (b" " * (spool.MAX_SPOOL_BYTES + 1), f"larger than {spool.MAX_SPOOL_BYTES} bytes"),
    ],
)
def test_a_spool_file_that_is_no_result_at_all_is_set_aside(spooled: Spooled, content: bytes, named: str) -> None:
    spooled.bad.write_bytes(content)
    [warning] = delivery_warnings(spooled)
    assert str(spooled.bad) in warning and named in warning
    assert Path(f"{spooled.bad}.rejected").read_bytes() == content
    spooled.check_only_the_good_one_was_delivered()


@needs_root
@pytest.mark.filterwarnings("ignore:wattwise. 1 spooled result.s. in .* belong to another user")  # again at each open
def test_another_users_spool_file_is_never_delivered_and_is_left_where_it_is(spooled: Spooled) -> None:
    # The attack: another user's file, with a valid result, would set the job's limit to 100 W.
    spooled.spoil(power_limit_w=100.0)
    os.chown(spooled.bad, OTHER_UID, USER_GID)
    assert spool.pending(spooled.url) == [spooled.good] and spool.not_yours(spooled.url) == [spooled.bad]
    [warning] = delivery_warnings(spooled)
    assert f"1 spooled result(s) in {spooled.bad.parent} belong to another user (uid {OTHER_UID})" in warning
    assert spooled.bad.name in warning and "`wattwise jobs sync` as that user" in warning
    assert spooled.bad.exists() and spool.rejected(spooled.url) == []  # theirs: not moved
    spooled.check_only_the_good_one_was_delivered()


def test_a_spool_entry_that_is_a_link_to_a_root_only_file_is_never_followed(spooled: Spooled, tmp_path: Path) -> None:
    # The link points at a valid result in a file only root may read: a reader following it would deliver it.
    target = tmp_path / "root-only.json"
    target.write_text(spooled.bad.read_text().replace("400.0", "100.0"))
    target.chmod(0o600)
    spooled.bad.unlink()
    spooled.bad.symlink_to(target)
    [warning] = delivery_warnings(spooled)
    assert f"{spooled.bad} was not delivered" in warning and "is a symbolic link" in warning
    assert Path(f"{spooled.bad}.rejected").is_symlink()  # the link itself set aside, the target untouched
    assert json.loads(target.read_text())["energy_j"] == 100.0
    spooled.check_only_the_good_one_was_delivered()


def test_a_spool_entry_hard_linked_to_another_file_is_not_read(spooled: Spooled, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    os.link(spooled.bad, elsewhere)
    [warning] = delivery_warnings(spooled)
    assert "has 1 other hard link(s)" in warning
    spooled.check_only_the_good_one_was_delivered()


def test_a_spool_file_writable_by_others_is_not_read(spooled: Spooled) -> None:
    spooled.bad.chmod(0o666)
    [warning] = delivery_warnings(spooled)
    assert "is writable by group or others (mode 0o666)" in warning
    spooled.check_only_the_good_one_was_delivered()


def test_a_valid_spool_file_is_delivered_whole(spooled: Spooled) -> None:
    store = spooled.open()
    store.close()
    runs = spooled.runs()
    assert (runs[spooled.bad_run.run_id].state, runs[spooled.bad_run.run_id].energy_j) == ("failed", 400.0)
    assert spooled.limits() == {spooled.bad_run.batch_size: 200.0}
    assert spool.pending(spooled.url) == [] and spool.rejected(spooled.url) == []


# -- the same bounds for what a run gives the store -------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryJobStore | SqlJobStore]:
    made = MemoryJobStore() if request.param == "memory" else SqlJobStore(store_url(str(tmp_path / "s.sqlite")))
    made.register_job(SPEC, 1.0)
    yield made
    made.close()


@pytest.mark.parametrize(
    ("figures", "named"),
    [
        ({"energy_j": math.nan}, "energy_j must be between 0 and 1e+15 J"),
        ({"cost": -1.0}, "cost must be between 0"),
        ({"epochs": -3}, "epochs must be an integer from 0"),
        ({"time_s": 1e300}, "time_s must be between 0 and 1e+09 s"),
    ],
)
def test_the_store_refuses_the_figures_the_spool_sets_aside(
    store: MemoryJobStore | SqlJobStore, figures: dict[str, float], named: str
) -> None:
    run = store.start_run(SPEC.name, lambda runs, limits: (32, "explore", math.inf), 2.0)
    given: dict[str, Any] = {"epochs": 1, "energy_j": 10.0, "time_s": 1.0, "cost": 5.5, "now_s": 3.0, **figures}
    with pytest.raises(UsageError, match=re.escape(named)):
        store.progress_run(SPEC.name, run.run_id, **given)
    with pytest.raises(UsageError, match=re.escape(named)):
        store.finish_run(SPEC.name, run.run_id, reached=False, **given)
    assert store.get_run(SPEC.name, run.run_id).state == "open"


@pytest.mark.parametrize("watts", [1e9, -50.0, 0.0, math.nan])
def test_the_store_refuses_a_power_limit_no_gpu_takes(store: MemoryJobStore | SqlJobStore, watts: float) -> None:
    with pytest.raises(UsageError, match="power_limit_w must be above 0 and at most 5000 W"):
        store.set_power_limit(SPEC.name, 32, watts)
    assert store.power_limits(SPEC.name) == {}


# -- what `wattwise jobs sync` and `jobs show` say ---------------------------------------------------------


def test_jobs_sync_and_show_go_on_with_one_warning_after_a_spool_file_with_wrong_types(
    spooled: Spooled, capsys: pytest.CaptureFixture[str]
) -> None:
    spooled.spoil(energy_j="1e3", cost=[])
    with pytest.warns(EnergyPluginWarning, match=r"energy_j must be a number") as caught:
        assert main(["jobs", "sync", "--store", str(spooled.path), "--json"]) == 0
    assert len(caught) == 1
    assert json.loads(capsys.readouterr().out) | {"store": None} == {
        "store": None,
        "delivered": 1,
        "rejected": 1,
        "pending": 0,
    }
    assert main(["jobs", "show", SPEC.name, "--store", str(spooled.path)]) == 0  # nothing left to deliver
    shown = capsys.readouterr().out
    assert "2 runs (0 reached, 1 failed, 1 open)" in shown


def test_jobs_show_delivers_what_it_can_and_shows_the_job(spooled: Spooled, capsys: pytest.CaptureFixture[str]) -> None:
    spooled.spoil(cost=[])
    with pytest.warns(EnergyPluginWarning, match=r"cost must be a number"):
        assert main(["jobs", "show", SPEC.name, "--store", str(spooled.path), "--json"]) == 0
    runs = {run["run_id"]: run for run in json.loads(capsys.readouterr().out)["runs"]}
    assert runs[spooled.good_run.run_id]["energy_j"] == 500.0 and runs[spooled.bad_run.run_id]["state"] == "open"


# -- a spool folder that cannot be written -----------------------------------------------------------------


class GoneStore(MemoryJobStore):
    """A store that goes away once the run has started."""

    url = "sqlite:////nowhere/jobs.sqlite"

    def get_run(self, name: str, run_id: int) -> StoredRun:
        raise spool.StoreUnavailable("cannot reach the job store", url=self.url, reason="gone")


def test_a_result_that_cannot_be_spooled_either_is_one_warning_not_a_crash() -> None:
    # Another user's spool folder in a shared WATTWISE_HOME (here: a file where the folder would be).
    folder = spool.spool_dir(GoneStore.url)
    folder.parent.mkdir(parents=True)
    folder.write_text("not a folder")
    store = GoneStore()
    optimizer = BatchSizeOptimizer(SPEC, store)
    run = optimizer.next_batch_size()
    with pytest.warns(EnergyPluginWarning, match=r"could not be spooled either .* so it is lost") as caught:
        assert optimizer.report_result(run.run_id, energy_j=10.0, time_s=1.0, reached=False, epochs=1) is None
    assert len(caught) == 1 and str(folder) in str(caught[0].message)


@needs_root
def test_a_spool_folder_another_user_made_first_is_refused_and_nothing_is_spooled_there(tmp_path: Path) -> None:
    # The folder's name is a hash anyone can compute: a user who makes it first could delete what is spooled.
    url = store_url(str(tmp_path / "jobs.sqlite"))
    folder = spool.spool_dir(url)
    folder.mkdir(parents=True, mode=0o700)
    os.chown(folder, OTHER_UID, USER_GID)
    result = spool.SpooledResult(
        job=SPEC.name, run_id=1, reached=False, epochs=1, energy_j=5.0, time_s=1.0, cost=5.0, now_s=time.time()
    )
    with pytest.raises(PermissionError, match=rf"spool folder {re.escape(str(folder))}: the folder is owned by uid"):
        spool.spool_result(url, result)
    assert list(folder.iterdir()) == []


def test_a_spool_folder_others_may_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    url = store_url(str(tmp_path / "jobs.sqlite"))
    folder = spool.spool_dir(url)
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    result = spool.SpooledResult(
        job=SPEC.name, run_id=1, reached=False, epochs=1, energy_j=5.0, time_s=1.0, cost=5.0, now_s=time.time()
    )
    with pytest.raises(PermissionError, match=r"writable by group or others .*remove it, or set WATTWISE_HOME"):
        spool.spool_result(url, result)
    assert list(folder.iterdir()) == []
