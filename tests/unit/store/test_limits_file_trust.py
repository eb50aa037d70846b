"""wattwise 0.1.0's file of remembered limits is imported only when it is the user's own, entry by entry only
what a tuning run could have chosen (issue 26: files another user can write).

In a shared `WATTWISE_HOME` another user can put `power_limits.json` where the store looks for it; its limits
would become the next run's power limit.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.ordinary_user import IS_ROOT, OTHER_UID, USER_GID
from wattwise.errors import EnergyPluginWarning
from wattwise.profile import ProfileEntry
from wattwise.safe_files import state_dir
from wattwise.store.limits_memory import LEGACY_FILE, LimitsMemory

GOOD = {
    "chosen": {"power_limit_w": 200.0, "time_s": 1.0, "energy_j": 150.0},
    "profile": [
        {"power_limit_w": 300.0, "time_s": 0.9, "energy_j": 180.0},
        {"power_limit_w": 200.0, "time_s": 1.0, "energy_j": 150.0},
    ],
    "saved_at": 1_767_225_600.0,
    "selector": "cost",
    "eta": 0.5,
}


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def legacy_file(entries: dict[str, Any]) -> Path:
    path = state_dir() / LEGACY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries))
    path.chmod(0o600)
    return path


def changed(entry: dict[str, Any], where: str, value: Any) -> dict[str, Any]:
    """`entry` with the field at `where` ("chosen.energy_j", "profile.1.time_s", "eta") set to `value`."""
    copy = json.loads(json.dumps(entry))
    *path, last = where.split(".")
    node = copy
    for part in path:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value
    return copy


@pytest.mark.parametrize(
    ("where", "value", "named"),
    [
        ("chosen.power_limit_w", 1e9, "bad: chosen.power_limit_w must be above 0 and at most 5000 W"),
        ("chosen.power_limit_w", -50, "bad: chosen.power_limit_w must be above 0 and at most 5000 W (got -50)"),
        ("chosen.power_limit_w", "100", "bad: chosen.power_limit_w must be a number"),
        ("chosen.energy_j", math.nan, "bad: chosen.energy_j must be above 0 and at most 1e+15 J (got nan)"),
        ("profile.1.time_s", -1.0, "bad: profile[1].time_s must be above 0 and at most 1e+09 s"),
        ("profile.0", [300, 1, 2], "bad: profile[0] must be an object of power_limit_w, time_s and energy_j"),
        ("profile", {"a": 1}, "bad: profile must be a list"),
        ("selector", 5, "bad: selector must be printable text of 1 to 32 characters (got 5)"),
        ("selector", "x" * 40, "bad: selector must be printable text of 1 to 32 characters"),
        ("eta", 5, "bad: eta must be between 0 and 1 (got 5)"),
        ("eta", "0.5", "bad: eta must be a number between 0 and 1 (got '0.5')"),
        ("saved_at", "yesterday", "bad: saved_at must be a number"),
        ("saved_at", -1.0, "bad: saved_at must be between 0 and 1e+11 s"),
    ],
)
def test_an_entry_with_a_field_no_tuning_run_gives_is_not_imported_and_named(
    where: str, value: Any, named: str
) -> None:
    path = legacy_file({"good": GOOD, "bad": changed(GOOD, where, value)})
    with pytest.warns(EnergyPluginWarning) as caught:
        memory = LimitsMemory()
        assert memory.load("good") == (
            ProfileEntry(200.0, 1.0, 150.0),
            [ProfileEntry(300.0, 0.9, 180.0), ProfileEntry(200.0, 1.0, 150.0)],
        )
        assert memory.load("bad") is None
    [warning] = caught
    assert named in str(warning.message) and f"left in {path}.imported" in str(warning.message)
    kept = json.loads(Path(f"{path}.imported").read_text())["bad"]
    assert json.dumps(kept) == json.dumps(changed(GOOD, where, value))  # as it was (NaN included)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give a file to another user (os.chown)")
def test_another_users_file_is_not_imported_and_left_where_it_is() -> None:
    path = legacy_file({"bert|NVIDIA A40|x4": changed(GOOD, "chosen.power_limit_w", 100.0)})
    os.chown(path, OTHER_UID, USER_GID)
    with pytest.warns(EnergyPluginWarning, match=rf"{path} belongs to uid {OTHER_UID}, not to you") as caught:
        assert LimitsMemory().load("bert|NVIDIA A40|x4") is None
    assert len(caught) == 1 and "were not imported" in str(caught[0].message)
    assert "it is left as it is" in str(caught[0].message)
    assert path.exists() and not Path(f"{path}.imported").exists()


def test_a_link_to_a_root_only_file_is_never_followed_and_is_set_aside(tmp_path: Path) -> None:
    target = tmp_path / "root-only.json"
    target.write_text(json.dumps({"bert|NVIDIA A40|x4": GOOD}))
    target.chmod(0o600)
    path = state_dir() / LEGACY_FILE
    path.parent.mkdir(parents=True)
    path.symlink_to(target)
    with pytest.warns(EnergyPluginWarning, match=rf"{path} is a symbolic link") as caught:
        assert LimitsMemory().load("bert|NVIDIA A40|x4") is None
    assert len(caught) == 1 and f"kept as {path}.rejected" in str(caught[0].message)
    assert Path(f"{path}.rejected").is_symlink() and not os.path.lexists(path)
    assert json.loads(target.read_text()) == {"bert|NVIDIA A40|x4": GOOD}


def test_a_file_others_may_write_is_not_imported_and_is_set_aside() -> None:
    path = legacy_file({"bert|NVIDIA A40|x4": GOOD})
    path.chmod(0o666)
    with pytest.warns(EnergyPluginWarning, match=r"is writable by group or others \(mode 0o666\)"):
        assert LimitsMemory().load("bert|NVIDIA A40|x4") is None
    assert Path(f"{path}.rejected").exists()


def test_a_file_that_is_no_json_object_is_kept_aside_with_one_warning() -> None:
    path = state_dir() / LEGACY_FILE
    path.parent.mkdir(parents=True)
    path.write_text("[" * 60_000)
    with pytest.warns(EnergyPluginWarning) as caught:
        assert LimitsMemory().load("x") is None
    [warning] = caught
    assert "not JSON (nested too deeply)" in str(warning.message)
    assert Path(f"{path}.imported").read_text() == "[" * 60_000
