"""A node agent served in a subprocess on a temp Unix socket with simulated GPUs, and its clients: the
agent tests' shared set-up (tests/integration/agent/)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support import ordinary_user
from wattwise.devices import DeviceError
from wattwise.devices.agent import AgentClient

if TYPE_CHECKING:
    from wattwise.agent.agent import Agent
    from wattwise.agent.processes import Peer

START_TIMEOUT_S = 60.0
HOLDER = """
import sys, time
from wattwise.devices.agent import AgentClient
AgentClient(sys.argv[1]).set_power_limit(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
print("held", flush=True)
time.sleep(120)
"""


@dataclass
class RunningAgent:
    proc: subprocess.Popen[bytes]
    socket: Path
    state_dir: Path
    sim_dir: Path
    metrics_port: int = 0

    @property
    def client(self) -> AgentClient:
        return AgentClient(self.socket)

    def gpu(self, index: int = 0) -> dict:
        return dict(self.client.status()["gpus"][index])

    def env(self) -> dict[str, str]:
        return {**os.environ, "WATTWISE_AGENT_SOCKET": str(self.socket)}


def start_agent(tmp_path: Path, *extra: str) -> RunningAgent:
    sock = tmp_path / "run" / "agent.sock"
    state, sim = tmp_path / "state", tmp_path / "sim"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wattwise",
            "agent",
            "serve",
            "--socket",
            str(sock),
            "--backend",
            "simulated",
            "--state-dir",
            str(state),
            "--simulated-dir",
            str(sim),
            "--simulated-gpus",
            "2",
            *extra,
        ],
        stderr=subprocess.PIPE,
    )
    agent = RunningAgent(proc, sock, state, sim)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the agent exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            agent.client.status()
            return agent
        except DeviceError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the agent did not start in time")


def stop_agent(agent: RunningAgent) -> str:
    if agent.proc.poll() is None:
        agent.proc.send_signal(signal.SIGTERM)
    _, err = agent.proc.communicate(timeout=30)
    return err.decode()


def start_holder(agent: RunningAgent, watts: float, job: str, index: int = 0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(agent.socket), str(index), str(watts), job],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def wait_free(agent: RunningAgent, index: int = 0, timeout_s: float = 2.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if agent.gpu(index)["holder"] is None:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"GPU {index} still held after {timeout_s} s: {agent.gpu(index)}")


def raw_request(agent: RunningAgent, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(agent.socket))
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


#: Numeric ids no account uses: the kernel needs no passwd entry to run a process as them.
USER_UID, OTHER_UID = ordinary_user.USER_UID, ordinary_user.OTHER_UID
SOCKET_GID, OUTSIDE_GID = ordinary_user.USER_GID, 54329


def as_user(
    uid: int,
    gid: int,
    agent: RunningAgent,
    args: list[str],
    *,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    **kwargs: object,
) -> subprocess.Popen[str]:
    env = {**agent.env(), "HOME": str(home or agent.socket.parent), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    env.pop("WATTWISE_HOME", None)
    return ordinary_user.popen_as(uid, gid, args, env=env, **kwargs)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to start the agent and run clients as other users"
)
needs_user_python = pytest.mark.skipif(
    ordinary_user.user_python() is None,
    reason=f"this Python ({os.path.realpath(sys.executable)}) lies under "
    f"{ordinary_user.unreachable_by_others(sys.executable)}, which other users may not enter, and no system "
    "Python of the same version exists: an ordinary user could not run wattwise",
)


@contextlib.contextmanager
def agent_for_users() -> Iterator[tuple[RunningAgent, Path]]:
    """An agent whose socket group may change settings, and a home folder owned by the ordinary user."""
    base = Path(tempfile.mkdtemp(prefix="wattwise-agent-"))  # traversable by others, unlike pytest's tmp dirs
    try:
        os.chmod(base, 0o755)
        config = base / "agent.yaml"
        config.write_text(f"allowed_groups: [{SOCKET_GID}]\n")
        home = base / "home"
        home.mkdir(mode=0o700)
        os.chown(home, USER_UID, SOCKET_GID)
        running = start_agent(base, "--config", str(config), "--group", str(SOCKET_GID))
        try:
            yield running, home
        finally:
            stop_agent(running)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_uid(uid: int) -> Callable[[socket.socket], Peer]:
    """An `identify` for `serve` that stands the test's own process in for user `uid`: its pid, start
    time and pidfd as the kernel gives them, with `uid` instead of root's."""
    from wattwise.agent.processes import identify_peer

    return lambda sock: replace(identify_peer(sock), uid=uid)


@contextlib.asynccontextmanager
async def served(
    agent: Agent, tmp_path: Path, identify: Callable[[socket.socket], Peer] | None = None
) -> AsyncIterator[Path]:
    """`agent` served in this process's event loop (`wattwise.agent.serve.serve`) on a socket under
    `tmp_path`, until the block ends; yields the socket's path. Clients call it from threads."""
    from wattwise.agent.processes import identify_peer
    from wattwise.agent.serve import ServeOptions, serve

    folder = tmp_path / "run"
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / "agent.sock"
    ready = asyncio.Event()
    task = asyncio.create_task(
        serve(agent, ServeOptions(str(path), str(tmp_path / "state")), ready.set, identify=identify or identify_peer)
    )
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiting.cancel()
        task.result()  # raises what stopped it
    try:
        yield path
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        _unquiet()


def _unquiet() -> None:
    """Take the agent's `QuietLog` filters off the log handlers again: the next test counts afresh."""
    import logging

    from wattwise.agent.connections import QuietLog

    for handler in logging.getLogger().handlers:
        for quiet in [f for f in handler.filters if isinstance(f, QuietLog)]:
            handler.removeFilter(quiet)
