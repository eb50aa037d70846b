"""The agent served in-process under a hostile user: a slow cgroup check, a recycled pid, a connect loop.

Each test serves a real `Agent` (simulated GPUs) on a Unix socket in the test's event loop and calls it
from threads with the real client, as other processes would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.agent_server import as_uid, served
from wattwise.agent import processes
from wattwise.agent.agent import Agent, AgentRefusal
from wattwise.agent.audit import AuditLog
from wattwise.agent.cgroups import PROBE, CgroupAnswer, CgroupUnknown, cgroup_may_open
from wattwise.agent.config import AgentConfig
from wattwise.agent.connections import ConnectionLimits, fair_order
from wattwise.agent.http import _pinned
from wattwise.agent.journal import AgentJournal
from wattwise.agent.processes import identify_peer
from wattwise.devices import simulated_gpus
from wattwise.devices.agent import AgentClient
from wattwise.devices.base import DeviceError
from wattwise.vocabulary import AllocationPolicy

#: A pid no process can have (above the kernel's PID_MAX_LIMIT), for the fake /proc.
FAKE_PID = 2**22 + 7


def make_agent(tmp_path: Path, allocation: AllocationPolicy = AllocationPolicy.NONE) -> Agent:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    return Agent(list(gpus), "simulated", AgentConfig(allocation=allocation), journal, AuditLog(tmp_path / "state"))


def test_a_slow_cgroup_check_of_one_client_holds_up_no_other_client(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, AllocationPolicy.CGROUP)
    probing, let_go, probed = threading.Event(), threading.Event(), threading.Event()
    asked: list[int] = []

    def slow_check(pid: int, spec: dict) -> CgroupAnswer:  # type: ignore[type-arg]
        asked.append(pid)
        probing.set()
        let_go.wait(2.0)  # a probe that takes 2 s (a frozen cgroup's helper would take 5)
        probed.set()
        return CgroupAnswer(True, Path("/sys/fs/cgroup/job_1"), "/dev/nvidia0")

    agent.cgroup_check = slow_check

    async def scenario() -> tuple[dict, bool, dict, dict]:  # type: ignore[type-arg]
        async with served(agent, tmp_path, identify=as_uid(1001)) as sock:
            client = AgentClient(sock)
            change = asyncio.ensure_future(asyncio.to_thread(client.set_power_limit, 0, 150.0, "train"))
            assert await asyncio.to_thread(probing.wait, 30)
            status = await asyncio.to_thread(client.status)
            answered_while_probing = not probed.is_set()
            let_go.set()
            changed = await change
            again = await asyncio.to_thread(client.set_power_limit, 0, 160.0, "train")
        return status, answered_while_probing, changed, again

    status, answered_while_probing, changed, again = asyncio.run(scenario())
    assert answered_while_probing, "GET /v1/gpus waited for another client's cgroup check"
    assert len(status["gpus"]) == 2 and status["gpus"][0]["holder"] is None
    assert changed["power_limit_w"] == 150.0 and changed["holder"]["uid"] == 1001
    assert again["power_limit_w"] == 160.0
    assert asked == [os.getpid()]  # the second change, by the lease's holder, asked nothing: cached for its lease


def test_one_users_cgroup_checks_in_progress_are_bounded(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, AllocationPolicy.CGROUP)
    from wattwise.agent.leases import Holder

    caller = Holder(os.getpid(), 1001, "train", processes.process_start_ticks(os.getpid()) or 0)
    agent._checking[1001] = 2  # two checks of uid 1001 in progress

    with pytest.raises(AgentRefusal, match="uid 1001 has 2 cgroup checks in progress already") as err:
        asyncio.run(agent.check_allocation(caller, 0))
    assert type(err.value).__name__ == "Busy"


def test_a_cgroup_check_that_times_out_says_so_without_the_helpers_source(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(cmd: list[str], **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd, 5.0)

    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.raises(CgroupUnknown) as err:
        cgroup_may_open(Path("/sys/fs/cgroup/user.slice"), "/dev/nvidia0")
    assert str(err.value) == "cannot check its cgroup /sys/fs/cgroup/user.slice: no answer in 5 s"
    assert "os.getpid" not in str(err.value) and PROBE.strip().splitlines()[0] not in str(err.value)


class FakeSocket:
    """A connection's socket as the kernel would describe its peer (SO_PEERCRED; no SO_PEERPIDFD)."""

    def __init__(self, pid: int, uid: int, gid: int) -> None:
        self.creds = struct.pack("3i", pid, uid, gid)

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        if option == socket.SO_PEERCRED:
            return self.creds
        raise OSError(92, "Protocol not available")


def fake_process(proc: Path, pid: int, start_ticks: int, uid: int) -> None:
    """/proc/PID/stat and /proc/PID/status of a running process of `uid` started at `start_ticks`."""
    folder = proc / str(pid)
    folder.mkdir(parents=True, exist_ok=True)
    fields = ["S", "1", str(pid)] + ["0"] * 16 + [str(start_ticks)] + ["0"] * 10
    (folder / "stat").write_text(f"{pid} (python) {' '.join(fields)}\n")
    (folder / "status").write_text(f"Name:\tpython\nPPid:\t1\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGroups:\t{uid}\n")


def test_a_pid_recycled_after_accept_by_another_users_process_is_not_taken_for_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    monkeypatch.setattr(processes, "PROC", str(proc))
    fake_process(proc, FAKE_PID, start_ticks=100, uid=1001)
    peer = identify_peer(FakeSocket(FAKE_PID, 1001, 1001))  # at accept
    assert (peer.pid, peer.uid, peer.start_ticks) == (FAKE_PID, 1001, 100)
    holder, groups = _pinned(peer)
    assert (holder.pid, holder.uid, holder.start_ticks, groups) == (FAKE_PID, 1001, 100, {1001})

    # The caller exits while its body is on the way; another user's process takes its pid.
    fake_process(proc, FAKE_PID, start_ticks=200, uid=1002)
    assert not peer.same_process()
    with pytest.raises(AgentRefusal, match="the calling process is gone"):
        _pinned(peer)


def test_a_pid_recycled_between_connect_and_accept_pins_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"
    monkeypatch.setattr(processes, "PROC", str(proc))
    fake_process(proc, FAKE_PID, start_ticks=300, uid=1002)  # another user's process under the caller's pid
    peer = identify_peer(FakeSocket(FAKE_PID, 1001, 1001))
    assert peer.start_ticks is None and not peer.same_process()
    with pytest.raises(AgentRefusal, match="the calling process is gone"):
        _pinned(peer)


def test_a_live_caller_is_pinned_by_pidfd_and_start_time(tmp_path: Path) -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        peer = identify_peer(left)
        try:
            assert (peer.pid, peer.start_ticks) == (os.getpid(), processes.process_start_ticks(os.getpid()))
            assert peer.same_process()
            assert peer.pidfd is not None or not hasattr(os, "pidfd_open")
        finally:
            peer.close()


def test_an_accept_pass_admits_root_first_then_one_of_each_user_in_turn() -> None:
    batch = [(1001, f"a{i}") for i in range(5)] + [(0, "root"), (1002, "b0"), (1001, "a5"), (1002, "b1")]
    order = [item for _, item in fair_order(batch)]
    assert order == ["root", "a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_a_users_connections_over_its_limit_are_refused_at_accept_and_roots_still_admitted() -> None:
    limits = ConnectionLimits(asyncio.new_event_loop(), per_uid=3, total=100)
    batch = [(1001, i) for i in range(50)] + [(0, "status")]
    admitted = [item for uid, item in fair_order(batch) if limits.admit(uid)]
    assert admitted == ["status", 0, 1, 2]
    assert limits.refused == 47


def test_one_users_connect_and_close_loop_does_not_stall_the_others(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    stop = threading.Event()
    loops = [0]

    async def scenario() -> list[int]:
        async with served(agent, tmp_path) as sock:

            def connect_and_close() -> None:
                while not stop.is_set():
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                        s.setblocking(False)
                        with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                            s.connect(str(sock))
                    loops[0] += 1

            flood = threading.Thread(target=connect_and_close)
            flood.start()
            try:
                answered = []
                for _ in range(10):
                    try:
                        status = await asyncio.to_thread(AgentClient(sock).status)
                        answered.append(len(status["gpus"]))
                    except DeviceError:
                        answered.append(-1)
            finally:
                stop.set()
                await asyncio.to_thread(flood.join)
        return answered

    assert asyncio.run(scenario()) == [2] * 10
    assert loops[0] > 100  # the loop ran all along


def _raw(sock: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock))
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_body_announced_over_64_kb_is_refused_with_413_before_it_is_sent(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    header = b"POST /v1/gpus/0/power_limit HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n"

    async def scenario() -> bytes:
        async with served(agent, tmp_path) as sock:
            return await asyncio.to_thread(_raw, sock, header)  # the body never comes

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b'{"error": "request body too large (at most 65536 bytes)"}' in answer
    assert agent.counts.refusals == {413: 1}


def test_a_body_that_does_not_arrive_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    header = b"POST /v1/gpus/0/power_limit HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 40\r\n\r\n{"

    async def scenario() -> bytes:
        async with served(agent, tmp_path) as sock:
            return await asyncio.to_thread(_raw, sock, header)

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"the request body did not arrive within 1 s" in answer
    assert agent.gpu_status(0)["holder"] is None


@pytest.mark.parametrize("policy", list(AllocationPolicy))
def test_the_agent_warns_at_start_when_its_policy_enforces_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: AllocationPolicy
) -> None:
    agent = make_agent(tmp_path, policy)

    async def scenario() -> None:
        async with served(agent, tmp_path):
            pass

    with caplog.at_level("WARNING", logger="wattwise.agent.serve"):
        asyncio.run(scenario())
    warned = [r.getMessage() for r in caplog.records if "allocation: none" in r.getMessage()]
    if policy == AllocationPolicy.NONE:
        assert warned == [
            "wattwise agent: no --config: `allocation: none`: anyone allowed to change settings may change any "
            "free GPU, other users' jobs' GPUs too; set `allocation: registered` (SLURM: the prolog registers "
            "each job's GPUs) or `allocation: cgroup` (containers) unless this node has one user"
        ]
    else:
        assert warned == []


def test_a_caller_whose_pid_is_recycled_during_its_cgroup_check_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, AllocationPolicy.CGROUP)
    proc = tmp_path / "proc"

    def check_then_recycle(pid: int, spec: dict) -> CgroupAnswer:  # type: ignore[type-arg]
        # While the cgroup was read, the caller exited and another user's process took its pid.
        fake_process(proc, pid, start_ticks=1, uid=1002)
        monkeypatch.setattr(processes, "PROC", str(proc))
        return CgroupAnswer(True, Path("/sys/fs/cgroup/other"), "/dev/nvidia0")

    agent.cgroup_check = check_then_recycle

    async def scenario() -> str:
        async with served(agent, tmp_path, identify=as_uid(1001)) as sock:
            try:
                await asyncio.to_thread(AgentClient(sock).set_power_limit, 0, 150.0, "train")
            except DeviceError as err:
                return str(err)
        return "changed"

    assert asyncio.run(scenario()) == "wattwise agent: the calling process is gone (or is in another PID namespace)"
    monkeypatch.undo()
    assert agent.gpu_status(0)["holder"] is None
