"""Remembered power limits live in the store: what a tuning run saves, the next run gets back with who
chose it and how; wattwise 0.1.0's JSON file is imported once, losing nothing.

`tests/data/power_limits_v1.json` was written by 0.1.0's own `LimitsMemory.save`.
"""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from tests.support.paths import DATA_DIR
from tests.support.store_checks import KEY, PROFILE, check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run
from wattwise.errors import EnergyPluginWarning
from wattwise.profile import ProfileEntry
from wattwise.recurring.spec import JobSpec
from wattwise.safe_files import state_dir
from wattwise.store import STORE_ENV, store_url
from wattwise.store.limits_memory import LEGACY_FILE, LimitsMemory, RememberedLimit, memory_key
from wattwise.store.sql import SqlJobStore

LEGACY_JSON = DATA_DIR / "power_limits_v1.json"


def test_sqlite_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(tmp_path: Path) -> None:
    check_a_saved_limit_comes_back_with_its_selector_eta_time_and_run(str(tmp_path / "store.sqlite"))


def test_limits_share_the_jobs_store_by_default_and_follow_the_store_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    LimitsMemory().save(KEY, PROFILE[1], PROFILE)
    default = state_dir() / "jobs.sqlite"
    assert stat.S_IMODE(default.stat().st_mode) == 0o600
    assert stat.S_IMODE(default.parent.stat().st_mode) == 0o700
    store = SqlJobStore(store_url(str(default)))
    store.register_job(
        JobSpec(
            name="bert/squad",
            batch_sizes=(32,),
            default_batch_size=32,
            target_metric=84.0,
            max_epochs=6,
            max_power_w=250.0,
        ),
        0.0,
    )
    store.close()
    assert LimitsMemory().load(KEY) == (PROFILE[1], PROFILE)

    monkeypatch.setenv(STORE_ENV, str(tmp_path / "shared.sqlite"))
    assert LimitsMemory().load(KEY) is None
    LimitsMemory().save(KEY, PROFILE[2], PROFILE)
    assert LimitsMemory(str(tmp_path / "shared.sqlite")).load(KEY) == (PROFILE[2], PROFILE)


def test_the_json_file_of_wattwise_0_1_is_imported_once_and_kept(caplog: pytest.LogCaptureFixture) -> None:
    saved = json.loads(LEGACY_JSON.read_text())
    # The store already knows both keys: one chosen before the file's entry (replaced by it), one after (kept).
    llama = memory_key("llama-ft", "NVIDIA H100 80GB HBM3", 8)
    memory = LimitsMemory()
    memory.save(KEY, PROFILE[0], PROFILE[:1], chosen_at_s=saved[KEY]["saved_at"] - 1)
    memory.save(llama, PROFILE[0], PROFILE[:1], selector="time", chosen_at_s=saved[llama]["saved_at"] + 1)
    legacy = state_dir() / LEGACY_FILE
    shutil.copy(LEGACY_JSON, legacy)

    with caplog.at_level("INFO", logger="wattwise.store.limits_memory"):
        found = LimitsMemory().recall(KEY)
    assert "imported 2 remembered power limits" in caplog.text
    entry = saved[KEY]
    assert found == RememberedLimit(
        chosen=ProfileEntry(**entry["chosen"]),
        profile=[ProfileEntry(**e) for e in entry["profile"]],
        selector=entry["selector"],
        eta=entry["eta"],
        chosen_at_s=entry["saved_at"],
        run_id=None,
    )
    assert memory.recall(llama) == RememberedLimit(PROFILE[0], PROFILE[:1], "time", None, saved[llama]["saved_at"] + 1)
    # The file is kept, renamed, byte for byte; it is not imported again.
    assert not legacy.exists()
    assert legacy.with_name(LEGACY_FILE + ".imported").read_bytes() == LEGACY_JSON.read_bytes()
    caplog.clear()
    memory.save(KEY, PROFILE[2], PROFILE, chosen_at_s=1.0)
    assert memory.load(KEY) == (PROFILE[2], PROFILE) and "imported" not in caplog.text


def test_unreadable_entries_of_the_json_file_stay_in_the_kept_file() -> None:
    legacy = state_dir() / LEGACY_FILE
    legacy.parent.mkdir(parents=True, exist_ok=True)
    good = {"chosen": {"power_limit_w": 200.0, "time_s": 1.0, "energy_j": 150.0}, "profile": [], "saved_at": 5.0}
    legacy.write_text(json.dumps({"good": good, "bad": {"chosen": {"watts": 1}}}))
    with pytest.warns(EnergyPluginWarning, match="not remembered power limits"):
        assert LimitsMemory().recall("good") == RememberedLimit(ProfileEntry(200.0, 1.0, 150.0), [], None, None, 5.0)
    assert json.loads(legacy.with_name(LEGACY_FILE + ".imported").read_text())["bad"] == {"chosen": {"watts": 1}}
    assert LimitsMemory().load("bad") is None
