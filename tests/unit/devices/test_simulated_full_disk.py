"""A simulated GPU's settings still change back on a full disk (issue 27): restoring must not depend on
finding a free block. The atomic write (a new file, then a rename) fails with ENOSPC there; the state file
is then overwritten in place, which needs no new block."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

import wattwise.devices.simulated.state as simulated_state
from wattwise.devices import SimulatedGPU
from wattwise.devices.base import DeviceError


def full_disk(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_limit_is_restored_on_a_full_disk_and_read_back_by_the_next_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "gpu0.json"
    gpu = SimulatedGPU(0, state_file=state)
    gpu.set_power_limit_w(275.0)
    monkeypatch.setattr(simulated_state, "write_text", full_disk)
    gpu.set_power_limit_w(300.0)  # what the guard's restore does
    assert gpu.power_limit_w() == 300.0
    assert json.loads(state.read_text())["power_limit_w"] == 300.0
    assert SimulatedGPU(0, state_file=state).power_limit_w() == 300.0  # another process reads it


def test_a_longer_state_is_written_over_the_truncated_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "gpu0.json"
    gpu = SimulatedGPU(0, state_file=state)
    gpu.set_power_limit_w(275.0)
    monkeypatch.setattr(simulated_state, "write_text", full_disk)
    gpu.lock_sm_clocks_mhz(gpu.supported_sm_clocks_mhz()[0], gpu.supported_sm_clocks_mhz()[0])
    assert SimulatedGPU(0, state_file=state).locked_sm_clocks_mhz() == gpu.locked_sm_clocks_mhz()


def test_without_a_state_file_a_full_disk_still_refuses_the_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = SimulatedGPU(0, state_file=tmp_path / "gpu0.json")
    monkeypatch.setattr(simulated_state, "write_text", full_disk)
    with pytest.raises(DeviceError, match="No space left on device"):
        gpu.set_power_limit_w(250.0)
    assert gpu.power_limit_w() == 300.0
