"""The simulated GPU's state file is read only when it can be trusted and holds valid settings (issue 26).

The state file is the GPU's settings: a forged one would give every process on it a power limit of 1e9 W, a
clock no GPU has, or (through a link) the content of a file only root may read. A file that fails leaves the
GPU at its defaults, with one warning naming the file and the setting, and is set aside when it is the user's.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_pynvml import FakeClock
from tests.support.ordinary_user import IS_ROOT, OTHER_UID, USER_GID, USER_UID
from wattwise.devices.simulated import ClockModel, PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning

MODEL = PowerModel(
    power_limits_w=(100.0, 200.0, 300.0),
    time_factors=(2.0, 1.2, 1.0),
    busy_power_w=(90.0, 170.0, 240.0),
    idle_power_w=50.0,
    clock=ClockModel(max_mhz=1800, min_mhz=300, step_mhz=100),
)


pytestmark = pytest.mark.usefixtures("simulated_home")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A state file as a GPU writes it: 150 W, clocks locked to [600, 1200] MHz."""
    path = tmp_path / "sim" / "gpu0.json"
    gpu_on(path).set_power_limit_w(150.0)
    gpu_on(path).lock_sm_clocks_mhz(600, 1200)
    return path


def gpu_on(state_file: Path) -> SimulatedGPU:
    clock = FakeClock()
    return SimulatedGPU(0, MODEL, state_file=state_file, clock=clock, sleep=clock.advance)


def settings(gpu: SimulatedGPU) -> tuple[float, tuple[int, int] | None]:
    return gpu.power_limit_w(), gpu.locked_sm_clocks_mhz()


def one_warning_on_opening(state_file: Path, match: str) -> tuple[SimulatedGPU, str]:
    with pytest.warns(EnergyPluginWarning, match=match) as caught:
        gpu = gpu_on(state_file)
        settings(gpu)
        settings(gpu)  # reading again re-reads nothing: the file did not change
    assert len(caught) == 1
    return gpu, str(caught[0].message)


def test_a_valid_state_file_gives_its_settings_without_a_warning(state: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings(gpu_on(state)) == (150.0, (600, 1200))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"power_limit_w": "150"}, r"power_limit_w must be a number, above 0 and at most 5000 W \(got '150', a str\)"),
        ({"power_limit_w": 1e9}, r"power_limit_w must be above 0 and at most 5000 W \(got 1000000000.0\)"),
        ({"power_limit_w": -50}, r"power_limit_w must be above 0 and at most 5000 W \(got -50\)"),
        ({"power_limit_w": math.nan}, r"power_limit_w must be above 0 and at most 5000 W \(got nan\)"),
        ({"power_limit_w": None}, r"power_limit_w must be a number"),
        ({"locked_sm_clocks_mhz": [600]}, r"locked_sm_clocks_mhz must be null or \[lowest, highest\] MHz"),
        ({"locked_sm_clocks_mhz": "600-1200"}, r"locked_sm_clocks_mhz must be null or \[lowest, highest\] MHz"),
        ({"locked_sm_clocks_mhz": ["a", 600]}, r"locked_sm_clocks_mhz must be an integer from 300 to 1800"),
        ({"locked_sm_clocks_mhz": [True, 600]}, r"locked_sm_clocks_mhz must be an integer from 300 to 1800"),
        ({"locked_sm_clocks_mhz": [1, 1]}, r"locked_sm_clocks_mhz must be an integer from 300 to 1800 \(got 1\)"),
        ({"locked_sm_clocks_mhz": [1200, 600]}, r"locked_sm_clocks_mhz \[1200, 600\] must name the lowest clock first"),
    ],
)
def test_a_state_file_with_a_setting_no_gpu_has_leaves_the_defaults_and_is_set_aside(
    state: Path, changes: dict[str, Any], named: str
) -> None:
    data = json.loads(state.read_text())
    data.update(changes)
    state.write_text(json.dumps(data))
    gpu, message = one_warning_on_opening(state, named)
    assert settings(gpu) == (300.0, None)
    assert f"simulated GPU 0: its state file {state} holds no settings of a simulated GPU" in message
    assert f"starts from its defaults (300 W, clocks unlocked) and the file is kept as {state}.rejected" in message
    assert Path(f"{state}.rejected").read_text() == json.dumps(data)  # as it was, NaN included
    gpu.set_power_limit_w(200.0)  # the next change writes a new state file
    assert settings(gpu_on(state)) == (200.0, None)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"[" * 60_000, "nested too deeply"),
        (b'{"power_limit_w": 15', "not JSON"),
        (b"\x00" * 10, "not JSON"),
        (b" " * ((1 << 16) + 1), "is larger than 65536 bytes"),
    ],
)
def test_a_state_file_that_holds_no_settings_at_all_is_set_aside(state: Path, content: bytes, named: str) -> None:
    state.write_bytes(content)
    gpu, _ = one_warning_on_opening(state, named)
    assert settings(gpu) == (300.0, None) and Path(f"{state}.rejected").read_bytes() == content


def test_a_state_file_that_is_a_link_to_a_root_only_file_is_never_followed(state: Path, tmp_path: Path) -> None:
    target = tmp_path / "root-only.json"
    target.write_text(json.dumps({"power_limit_w": 120.0, "locked_sm_clocks_mhz": None}))
    target.chmod(0o600)
    state.unlink()
    state.symlink_to(target)
    gpu, _ = one_warning_on_opening(state, "is a symbolic link")
    assert settings(gpu) == (300.0, None)
    assert Path(f"{state}.rejected").is_symlink() and json.loads(target.read_text())["power_limit_w"] == 120.0


def test_a_state_file_others_may_write_is_not_read(state: Path) -> None:
    state.chmod(0o666)
    gpu, _ = one_warning_on_opening(state, r"is writable by group or others \(mode 0o666\)")
    assert settings(gpu) == (300.0, None)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give a file to another user (os.chown)")
def test_another_users_state_file_is_not_read_and_left_where_it_is(state: Path) -> None:
    os.chown(state, OTHER_UID, USER_GID)
    gpu, message = one_warning_on_opening(state, rf"belongs to uid {OTHER_UID}, not to you")
    assert settings(gpu) == (300.0, None)
    assert message.endswith("the file is left as it is") and state.exists()


@pytest.mark.skipif(not IS_ROOT, reason="needs root to make a root-owned file (the node agent's)")
def test_an_ordinary_user_reads_the_node_agents_root_owned_state_file(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process of the agent's users reads the GPU's settings from the agent's own (root's) state file.
    monkeypatch.setattr(os, "geteuid", lambda: USER_UID)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings(gpu_on(state)) == (150.0, (600, 1200))


def test_the_state_file_is_written_readable_by_all_writable_by_its_owner_whatever_the_umask(tmp_path: Path) -> None:
    state = tmp_path / "sim" / "gpu0.json"
    old = os.umask(0o002)
    try:
        gpu_on(state).set_power_limit_w(250.0)
    finally:
        os.umask(old)
    assert state.stat().st_mode & 0o777 == 0o644
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpu_on(state).power_limit_w() == 250.0
