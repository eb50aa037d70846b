"""The guard under faults: two processes on one GPU, a SIGKILLed run's leftover, a recycled pid, a full
disk, corrupted or foreign journals, and the demo stopped by a signal.

Crash paths run real child processes on a simulated GPU whose settings persist in a state file inside the
state dir (as a real GPU keeps them after the process dies); the test process is the second process.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import stat
import warnings
from pathlib import Path
from typing import Any

import pytest

import wattwise.devices
import wattwise.settings.journal
from tests.support.guard_fixtures import MAX_W, journals, limit_on_gpu, short_tuning_run, train_steps
from wattwise.cli.main import main
from wattwise.devices.base import DeviceLostError
from wattwise.devices.simulated import SimulatedGPU
from wattwise.run import EnergyPluginWarning
from wattwise.safe_files import state_dir
from wattwise.settings.guard import JournalError, SettingsGuard
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals

pytestmark = pytest.mark.usefixtures("simulated_home")


def no_space(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_change_that_cannot_be_journalled_is_not_made(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    monkeypatch.setattr(wattwise.settings.journal, "write_journal", no_space)
    with SettingsGuard() as guard:
        with pytest.raises(JournalError, match="No space left on device"):
            guard.set_power_limit(gpu, 150.0)
        assert not guard.changed
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_a_full_disk_after_a_change_still_restores_it(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    other = SimulatedGPU(1, state_file=state_file.with_name("gpu1.json"))
    guard = SettingsGuard()
    guard.set_power_limit(gpu, 150.0)
    monkeypatch.setattr(wattwise.settings.journal, "write_journal", no_space)  # the disk fills up
    with pytest.raises(JournalError):
        guard.set_power_limit(other, 150.0)
    assert other.power_limit_w() == MAX_W
    result = guard.close()
    assert result.failed == []
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_a_tuning_run_on_a_full_disk_warns_once_and_leaves_the_gpu_as_found(
    monkeypatch: pytest.MonkeyPatch, state_file: Path, tmp_path: Path
) -> None:
    run, gpu = short_tuning_run(state_file, tmp_path / "r")
    monkeypatch.setattr(wattwise.settings.journal, "write_journal", no_space)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        train_steps(run, gpu, 5)
    messages = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(messages) == 1 and "No space left on device" in messages[0]
    assert limit_on_gpu(state_file) == MAX_W


# -- 5. corrupted journals ------------------------------------------------------------------------------


def journal_text(state_file: Path, **change: Any) -> str:
    device = {"backend": "simulated", "index": 0, "state_file": str(state_file), "limit_range_w": [100.0, 300.0]}
    entry = {"device": device, "setting": "power_limit_w", "original": MAX_W, **change}
    return json.dumps({"pid": 4242, "host": socket.gethostname(), "created": 0.0, "changes": [entry]})


CORRUPTED: dict[str, Any] = {
    "original-object": lambda sf: journal_text(sf, original={"w": 300}),
    "clocks-one-value": lambda sf: journal_text(sf, setting="locked_sm_clocks_mhz", original=[1410]),
    "huge-pid": lambda sf: journal_text(sf).replace('"pid": 4242', f'"pid": {2**70}'),
    "not-json": lambda sf: "this is not a journal",
    "binary": lambda sf: b"\xff\xfe\x00\x81garbage",
    "list": lambda sf: "[1, 2, 3]",
}


@pytest.mark.parametrize("kind", sorted(CORRUPTED))
def test_a_corrupted_journal_is_skipped_with_one_line_and_kept(
    kind: str, state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)
    gpu.set_power_limit_w(150.0)
    path = journal_dir() / "bad.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    content = CORRUPTED[kind](state_file)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["restore"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"FAILED {path}: ") and "skipped" in out[0]
    assert path.exists()
    with pytest.warns(EnergyPluginWarning, match=r"left changed by a dead process: .*skipped"):
        SettingsGuard().close()  # a run starting now goes on, with one warning naming the file
    assert limit_on_gpu(state_file) == 150.0


def test_a_journal_whose_state_file_is_a_folder_is_skipped(state_file: Path) -> None:
    state_file.mkdir(parents=True)
    path = journal_dir() / "dir.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(journal_text(state_file))
    result = recover_stale_journals()
    assert len(result.failed) == 1 and "not a regular file" in result.failed[0] and str(path) in result.failed[0]
    assert path.exists() and state_file.is_dir()


# -- 6. journals are trusted only when they are yours ---------------------------------------------------


def test_the_journal_folder_is_created_private(state_file: Path) -> None:
    with SettingsGuard() as guard:
        guard.set_power_limit(SimulatedGPU(0, state_file=state_file), 150.0)
        assert stat.S_IMODE(journal_dir().stat().st_mode) == 0o700
        assert stat.S_IMODE(guard.journal_path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("others can write it", "writable by group or others (mode 0o666)"),
        ("it has another hard link", "has 1 other hard link(s)"),
    ],
)
def test_a_journal_that_is_not_only_yours_is_refused_and_kept(how: str, why: str, state_file: Path) -> None:
    SimulatedGPU(0, state_file=state_file).set_power_limit_w(150.0)
    path = journal_dir() / "suspect.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(journal_text(state_file))
    if how == "others can write it":
        path.chmod(0o666)
    else:
        path.chmod(0o600)
        os.link(path, state_dir() / "elsewhere.json")
    result = recover_stale_journals()
    assert len(result.failed) == 1 and why in result.failed[0]
    assert limit_on_gpu(state_file) == 150.0 and path.exists()


def test_a_journal_owned_by_someone_else_is_refused(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> None:
    SimulatedGPU(0, state_file=state_file).set_power_limit_w(150.0)
    path = journal_dir() / "foreign.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(journal_text(state_file))
    real = os.geteuid()
    with monkeypatch.context() as another_user:
        another_user.setattr(os, "geteuid", lambda: real + 1)  # as if another user ran restore
        result = recover_stale_journals()
    assert len(result.failed) == 1 and f"owned by uid {real}, not by you (uid {real + 1})" in result.failed[0]
    assert limit_on_gpu(state_file) == 150.0


@pytest.mark.parametrize("where", ["outside", "symlink", "wrong-name"])
def test_a_journal_never_names_a_file_to_overwrite(where: str, tmp_path: Path, state_file: Path) -> None:
    victim = tmp_path / "victim" / "gpu0.json"
    victim.parent.mkdir()
    victim.write_text("secret")
    victim.chmod(0o600)
    if where == "outside":
        target = victim
    elif where == "symlink":
        state_file.parent.mkdir(parents=True)
        state_file.symlink_to(victim)
        target = state_file
    else:
        target = state_dir() / "store.json"
    path = journal_dir() / "evil.json"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(journal_text(target))
    result = recover_stale_journals()
    assert result.restored == [] and len(result.failed) == 1 and str(path) in result.failed[0]
    assert victim.read_text() == "secret"
    assert not (state_dir() / "store.json").exists()


# -- 7. the demo under signals --------------------------------------------------------------------------


def limited_then_lost(monkeypatch: pytest.MonkeyPatch, state_file: Path) -> tuple[SettingsGuard, SimulatedGPU]:
    """A guard that limited a simulated GPU to 150 W, which then falls off the bus at its next change."""
    gpu = SimulatedGPU(0, state_file=state_file)
    guard = SettingsGuard()
    guard.set_power_limit(gpu, 150.0)

    def fell_off_the_bus(watts: float) -> None:
        raise DeviceLostError("GPU 0 fell off the bus")

    monkeypatch.setattr(gpu, "set_power_limit_w", fell_off_the_bus)
    return guard, gpu


def test_wattwise_logs_to_a_null_handler_and_a_setting_it_cannot_restore_is_a_warning(
    monkeypatch: pytest.MonkeyPatch, state_file: Path
) -> None:
    # A script that configures no logging hears nothing from wattwise's logger (the logging HOWTO's rule for
    # a library) but still sees, as a warning, a GPU setting left changed.
    assert [type(h) for h in logging.getLogger("wattwise").handlers] == [logging.NullHandler]
    guard, _ = limited_then_lost(monkeypatch, state_file)
    with pytest.warns(EnergyPluginWarning, match="could not restore .*fell off the bus"):
        result = guard.restore_all()
    assert len(result.failed) == 1 and limit_on_gpu(state_file) == 150.0
    monkeypatch.undo()


def test_a_gpu_a_change_found_lost_is_not_warned_of_again_when_its_restore_fails(
    monkeypatch: pytest.MonkeyPatch, state_file: Path
) -> None:
    # The change that found the GPU lost raised to its caller, which says so once (the run's one warning); the
    # restore that fails for the same cause is in the result, not a second warning.
    guard, gpu = limited_then_lost(monkeypatch, state_file)
    with pytest.raises(DeviceLostError):
        guard.set_power_limit(gpu, 100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EnergyPluginWarning)
        result = guard.restore_all()
    assert len(result.failed) == 1 and "fell off the bus" in result.failed[0]
    assert limit_on_gpu(state_file) == 150.0  # still to restore: the journal keeps it for the next run
    monkeypatch.undo()
    guard.restore_all()
    assert limit_on_gpu(state_file) == MAX_W
