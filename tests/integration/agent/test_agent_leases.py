"""The agent's lease table, config and lease logic, without HTTP (see test_agent.py for the served agent)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import pytest

from wattwise.agent.leases import Holder
from wattwise.agent.server import ProcessWatcher, process_start_ticks


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


