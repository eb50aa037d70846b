"""The settings guard puts every changed GPU setting back, on every way out of a process.

Crash paths run in a child process that changes a simulated GPU's power limit (persisted in a state file,
as a real GPU keeps it after the process dies) and is then signalled; the state file is what the next
process would find on the GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.guard_fixtures import MAX_W, journals, limit_on_gpu
from wattwise.devices.base import DeviceError
from wattwise.devices.simulated import SimulatedGPU
from wattwise.errors import EnergyPluginWarning
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals

pytestmark = pytest.mark.usefixtures("simulated_home")


def test_close_restores_the_original_limit_and_removes_the_journal(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    guard = SettingsGuard(recover=False)
    guard.set_power_limit(gpu, 175.0)
    assert limit_on_gpu(state_file) == 175.0
    assert guard.changed
    assert [p.name for p in journals()] == [guard.journal_path.name]
    result = guard.close()
    assert limit_on_gpu(state_file) == MAX_W
    assert result.failed == [] and len(result.restored) == 1
    assert journals() == []
    assert not guard.changed


def test_context_manager_restores_on_normal_exit(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    with SettingsGuard(recover=False) as guard:
        guard.set_power_limit(gpu, 200.0)
        guard.lock_sm_clocks(gpu, 600, 900)
        assert gpu.locked_sm_clocks_mhz() == (600, 900)
    reopened = SimulatedGPU(0, state_file=state_file)
    assert reopened.power_limit_w() == MAX_W
    assert reopened.locked_sm_clocks_mhz() is None
    assert journals() == []


def test_context_manager_restores_when_the_body_raises(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    with pytest.raises(RuntimeError, match="training diverged"), SettingsGuard(recover=False) as guard:
        guard.set_power_limit(gpu, 125.0)
        raise RuntimeError("training diverged")
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_the_original_is_the_first_value_not_an_intermediate_one(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    gpu.set_power_limit_w(275.0)  # set before wattwise started: that is the original
    with SettingsGuard(recover=False) as guard:
        guard.set_power_limit(gpu, 250.0)
        guard.set_power_limit(gpu, 150.0)
        guard.set_power_limit(gpu, 200.0)
        journal = json.loads(guard.journal_path.read_text())
        assert [c["original"] for c in journal["changes"]] == [275.0]
    assert limit_on_gpu(state_file) == 275.0


def test_locked_clocks_are_restored_to_the_locked_range_found(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    gpu.lock_sm_clocks_mhz(900, 1200)
    with SettingsGuard(recover=False) as guard:
        guard.reset_sm_clocks(gpu)
        guard.lock_sm_clocks(gpu, 300, 600)
    assert SimulatedGPU(0, state_file=state_file).locked_sm_clocks_mhz() == (900, 1200)


def test_restoring_twice_is_harmless(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    guard = SettingsGuard(recover=False)
    guard.set_power_limit(gpu, 150.0)
    guard.restore_all()
    gpu.set_power_limit_w(180.0)  # changed outside the guard after its restore: not the guard's business
    second = guard.close()
    assert second.restored == [] and second.failed == []
    assert limit_on_gpu(state_file) == 180.0


def test_a_refused_first_change_leaves_nothing_to_restore(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    with SettingsGuard(recover=False) as guard:
        with pytest.raises(ValueError, match="outside the allowed range"):
            guard.set_power_limit(gpu, 1000.0)
        assert limit_on_gpu(state_file) == MAX_W
        assert not guard.changed
        assert journals() == []


def test_a_refused_later_change_keeps_the_original_journalled(state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    with SettingsGuard(recover=False) as guard:
        guard.set_power_limit(gpu, 200.0)
        with pytest.raises(ValueError, match="outside the allowed range"):
            guard.set_power_limit(gpu, 1000.0)
        assert limit_on_gpu(state_file) == 200.0
        (journal,) = journals()
        assert json.loads(journal.read_text())["changes"][0]["original"] == MAX_W
    assert limit_on_gpu(state_file) == MAX_W


class FlakyGPU(SimulatedGPU):
    """A simulated GPU whose power-limit calls fail while `lost` is set (a GPU fallen off the bus)."""

    lost = False

    def set_power_limit_w(self, watts: float) -> None:
        if self.lost:
            raise DeviceError("GPU is lost")
        super().set_power_limit_w(watts)


def test_a_restore_that_fails_keeps_the_journal_and_can_be_retried(state_file: Path) -> None:
    gpu = FlakyGPU(0, state_file=state_file)
    guard = SettingsGuard(recover=False)
    guard.set_power_limit(gpu, 150.0)
    gpu.lost = True
    with pytest.warns(EnergyPluginWarning, match="could not restore simulated device 0: .*GPU is lost"):
        result = guard.restore_all()
    assert result.restored == []
    assert len(result.failed) == 1 and "GPU is lost" in result.failed[0]
    assert journals() == [guard.journal_path]
    assert json.loads(guard.journal_path.read_text())["changes"][0]["original"] == MAX_W
    gpu.lost = False
    retry = guard.close()
    assert len(retry.restored) == 1 and retry.failed == []
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


# -- signals and crashes ------------------------------------------------------------------------------


def test_an_unreadable_journal_is_reported_and_kept() -> None:
    path = journal_dir() / "torn.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"pid": 12')
    result = recover_stale_journals()
    assert len(result.failed) == 1 and "torn.json" in result.failed[0]
    assert path.exists()


def test_nothing_to_recover_when_no_journal_folder_exists() -> None:
    result = recover_stale_journals()
    assert (result.restored, result.failed) == ([], [])
