"""The agent's lease table, config and lease logic, without HTTP (see test_agent.py for the served agent)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest

from wattwise.agent.leases import Holder
from wattwise.agent.processes import ProcessWatcher, process_start_ticks


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling /proc"])
def test_the_watcher_notices_a_holders_sigkill(pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not pidfd:
        monkeypatch.setattr(ProcessWatcher, "_pidfd", staticmethod(lambda holder: None))
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("os.pidfd_open needs Linux 5.3 and Python 3.9")

    async def scenario() -> float:
        ended: asyncio.Event = asyncio.Event()
        proc = subprocess.Popen(["sleep", "30"])
        try:
            ticks = process_start_ticks(proc.pid)
            assert ticks is not None
            watcher = ProcessWatcher(asyncio.get_running_loop(), lambda holder: ended.set())
            watcher.watch(Holder(proc.pid, os.getuid(), "", ticks))
            start = time.monotonic()
            proc.kill()
            await asyncio.wait_for(ended.wait(), 5)
            return time.monotonic() - start
        finally:
            proc.kill()
            proc.wait()

    assert asyncio.run(scenario()) < 1.0


def test_holders_that_follow_process_groups_are_polled_with_one_pass_over_proc_for_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two commands whose wrappers have ended: each lease follows its command's process group, where a
    # shell (the group's leader) waits for a sleep.
    import wattwise.agent.processes as processes

    monkeypatch.setattr(ProcessWatcher, "_pidfd", staticmethod(lambda holder: None))
    asked: list[set[int]] = []
    real = processes.groups_with_members

    def counting(pgids):  # type: ignore[no-untyped-def]
        asked.append(set(pgids))
        return real(pgids)

    monkeypatch.setattr(processes, "groups_with_members", counting)
    wrappers = [subprocess.Popen(["true"]) for _ in range(2)]
    gone = [(w.pid, process_start_ticks(w.pid, ended_too=True)) for w in wrappers]
    for w in wrappers:
        w.wait()
    groups = [subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True) for _ in range(2)]
    deadline = time.monotonic() + 10
    while real({g.pid for g in groups}) != {g.pid for g in groups}:  # each shell has started its sleep
        assert time.monotonic() < deadline, "the shells did not start their sleep"
        time.sleep(0.02)

    async def scenario() -> list[int]:
        ended: list[int] = []
        watcher = ProcessWatcher(asyncio.get_running_loop(), lambda holder: ended.append(holder.pgid))
        for shell, (pid, pid_ticks) in zip(groups, gone, strict=True):
            ticks = process_start_ticks(shell.pid)
            assert ticks is not None and pid_ticks is not None
            watcher.watch(Holder(pid, os.getuid(), "", pid_ticks, pgid=shell.pid, pgid_ticks=ticks))
        await asyncio.sleep(0.5)
        assert ended == []  # both groups run on
        assert asked and all(pgids == {g.pid for g in groups} for pgids in asked)  # one pass for both
        for shell in groups:
            os.killpg(shell.pid, 9)
            shell.wait()
            deadline = time.monotonic() + 5
            while shell.pid not in ended and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        watcher.close()
        return ended

    try:
        assert asyncio.run(scenario()) == [g.pid for g in groups]
    finally:
        for shell in groups:
            if shell.poll() is None:
                os.killpg(shell.pid, 9)
                shell.wait()
