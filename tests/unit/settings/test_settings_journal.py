"""The settings package's journal, locks and atomic writing, as the guard and the node agent share them.

One journal format: a journal the agent wrote is restored by `wattwise restore`'s recovery, and a
journal written by the guard's code is restored by the agent at its start. One set of trust checks: a
symbolic link or a journal of another user is refused, by both.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.guard_fixtures import MAX_W
from wattwise.agent.agent import Agent
from wattwise.agent.config import AgentConfig
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.devices import simulated_gpus
from wattwise.devices.simulated import SimulatedGPU
from wattwise.errors import UsageError
from wattwise.safe_files import lock_descriptor, state_dir
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import JournalChange, JournalFile, JournalProblem, read_journal, save_changes
from wattwise.settings.locks import probe, release_lock, take_lock
from wattwise.settings.recovery import recover_stale_journals

ALICE = Holder(pid=101, uid=1000, job="bert", start_ticks=5)


@contextlib.contextmanager
def held_elsewhere(lock: Path, *, pid: int) -> Iterator[None]:
    """The lock held as another process holds it: its own open file (flock is per open file), its pid in it."""
    fd = lock_descriptor(lock)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{pid}\n".encode())
        yield
    finally:
        os.close(fd)


def _agent(folder: Path, sim: Path) -> Agent:
    journal = AgentJournal(folder)
    journal.prepare()
    return Agent(list(simulated_gpus(2, persist_dir=sim)), "simulated", AgentConfig(), journal)


def test_a_journal_the_agent_wrote_is_restored_by_wattwise_restore(tmp_path: Path) -> None:
    sim = state_dir() / "simulated"  # where `wattwise restore` trusts a simulated GPU's state file
    agent = _agent(tmp_path / "agent", sim)
    agent.set_power_limit(1, ALICE, set(), 150.0)
    agent.journal.close()  # the agent dies here: its lock is free, its journal stays
    assert SimulatedGPU(1, state_file=sim / "gpu1.json").power_limit_w() == 150.0
    result = recover_stale_journals(tmp_path / "agent")
    assert result.failed == []
    assert "simulated device 1: power_limit_w -> 300.0" in result.restored
    assert SimulatedGPU(1, state_file=sim / "gpu1.json").power_limit_w() == MAX_W
    assert not (tmp_path / "agent" / "journal.json").exists()


def test_a_live_agents_journal_is_left_to_it(tmp_path: Path) -> None:
    sim = state_dir() / "simulated"
    agent = _agent(tmp_path / "agent", sim)
    agent.set_power_limit(0, ALICE, set(), 150.0)
    agent.journal.close()
    with held_elsewhere(agent.journal.lock, pid=4321):  # the agent runs on, in its own process
        result = recover_stale_journals(tmp_path / "agent")
    assert result.restored == [] and result.failed == []
    assert result.held == [
        f"{agent.journal.path}: held by wattwise process PID 4321, still running (it restores "
        "its settings when it ends)"
    ]
    assert SimulatedGPU(0, state_file=sim / "gpu0.json").power_limit_w() == 150.0


def test_a_journal_the_guard_wrote_is_restored_by_the_agent_at_its_start(tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    gpu = SimulatedGPU(0, state_file=sim / "gpu0.json")
    guard = SettingsGuard(tmp_path / "guard", recover=False)
    guard.lock_sm_clocks(gpu, 900, 900)
    # The guard's process dies: its journal is what the agent finds in its state dir after an upgrade.
    (tmp_path / "agent").mkdir(mode=0o700)
    os.replace(guard.journal_path, tmp_path / "agent" / "journal.json")
    agent = _agent(tmp_path / "agent", sim)
    assert agent.recover() == ["GPU 0: SM clocks unlocked"]
    assert gpu.locked_sm_clocks_mhz() is None
    assert AgentJournal(tmp_path / "agent").load() == []


def test_an_older_agents_journal_is_still_restored_after_an_upgrade(tmp_path: Path) -> None:
    sim = tmp_path / "sim"
    SimulatedGPU(1, state_file=sim / "gpu1.json").set_power_limit_w(150.0)
    folder = tmp_path / "agent"
    folder.mkdir(mode=0o700)
    legacy = {
        "version": 1,
        "backend": "simulated",
        "gpus": {
            "1": {
                "holder": {"pid": 101, "uid": 1000, "job": "bert", "start_ticks": 5},
                "originals": {"power_limit_w": 280.0, "locked_sm_clocks_mhz": None},
            }
        },
    }
    (folder / "journal.json").write_text(json.dumps(legacy))
    (folder / "journal.json").chmod(0o600)
    agent = _agent(folder, sim)
    assert agent.recover() == ["GPU 1: power limit 280 W, SM clocks unlocked"]
    assert SimulatedGPU(1, state_file=sim / "gpu1.json").power_limit_w() == 280.0
    assert not (folder / "journal.json").exists()


def test_an_older_agents_journal_with_a_bad_original_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir(mode=0o700)
    legacy = {"version": 1, "backend": "simulated", "gpus": {"0": {"originals": {"power_limit_w": -5}}}}
    (folder / "journal.json").write_text(json.dumps(legacy))
    with pytest.raises(UsageError, match=r"original power limit -5 is not a positive number of watts"):
        AgentJournal(folder).load()


def test_a_symlinked_journal_is_refused_by_the_agent_and_by_recovery(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir(mode=0o700)
    target = tmp_path / "elsewhere.json"
    save_changes(
        target, [{"device": {"backend": "simulated", "index": 0}, "setting": "power_limit_w", "original": 300.0}]
    )
    (folder / "journal.json").symlink_to(target)
    with pytest.raises(UsageError, match=r"journal\.json: is a symbolic link"):
        AgentJournal(folder).prepare()
    with pytest.raises(JournalProblem, match="a symbolic link"):
        read_journal(folder / "journal.json")
    result = recover_stale_journals(folder)
    assert result.restored == [] and len(result.failed) == 1 and "symbolic link" in result.failed[0]
    assert target.exists()


def test_a_journal_of_another_user_is_refused_by_the_agent_and_by_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "agent"
    agent = _agent(folder, tmp_path / "sim")
    agent.set_power_limit(0, ALICE, set(), 150.0)
    agent.journal.close()
    real = os.geteuid()
    with monkeypatch.context() as another_user:
        another_user.setattr(os, "geteuid", lambda: real + 1)  # as if another user read it
        with pytest.raises(UsageError, match=rf"owned by uid {real}, not by you \(uid {real + 1}\)"):
            AgentJournal(folder).prepare()
        result = recover_stale_journals(folder)
    assert result.restored == [] and len(result.failed) == 1 and f"owned by uid {real}" in result.failed[0]
    assert SimulatedGPU(0, state_file=tmp_path / "sim" / "gpu0.json").power_limit_w() == 150.0


def test_a_second_agent_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir(mode=0o700)
    with (
        held_elsewhere(folder / "journal.lock", pid=4321),
        pytest.raises(UsageError, match=r"another agent \(PID 4321\) uses it"),
    ):
        AgentJournal(folder).prepare()
    AgentJournal(folder).prepare()  # the other agent gone, the state dir is free


def test_a_lock_is_shared_within_a_process_and_held_until_its_last_user_lets_go(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    assert take_lock(lock) and take_lock(lock)
    release_lock(lock)
    assert probe(lock) == os.getpid()
    release_lock(lock, unlink=True)
    assert probe(lock) is None and not lock.exists()


def test_a_lock_file_is_never_opened_through_a_symbolic_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "x.lock").symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        take_lock(tmp_path / "x.lock")
    assert victim.read_text() == "keep"
    with pytest.raises(FileNotFoundError):
        lock_descriptor(tmp_path / "missing.lock", create=False)
    assert not (tmp_path / "missing.lock").exists()


def test_a_journal_is_written_whole_0600_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "j.json"
    change: JournalChange = {
        "device": {"backend": "nvml", "index": 0, "uuid": "GPU-1"},
        "setting": "power_limit_w",
        "original": 250.0,
    }
    save_changes(path, [change])
    assert read_journal(path).changes == [change] and read_journal(path).pid == os.getpid()
    assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.json"]
    save_changes(path, [])
    assert list(tmp_path.iterdir()) == []


def test_the_guards_journal_on_disk_holds_the_typed_fields_in_their_order(tmp_path: Path) -> None:
    gpu = SimulatedGPU(0, state_file=tmp_path / "sim" / "gpu0.json")
    original_w = gpu.power_limit_w()
    guard = SettingsGuard(tmp_path / "guard", recover=False)
    guard.set_power_limit(gpu, 150.0)
    on_disk = json.loads(guard.journal_path.read_text())
    assert list(on_disk) == ["pid", "host", "created", "changes"]
    assert set(on_disk) == JournalFile.__required_keys__ | JournalFile.__optional_keys__
    (change,) = on_disk["changes"]
    assert list(change) == ["device", "setting", "original"] and set(change) == JournalChange.__required_keys__
    assert (on_disk["pid"], change["setting"], change["original"]) == (os.getpid(), "power_limit_w", original_w)
    guard.restore_all()
