"""The node agent on a shared node (issue 26): restarts keep live holders, attacks from the socket's group fail.

Each test starts its own agent on the simulated backend (`test_agent`'s helpers) and attacks it the way the
issue reproduced: a restart under a live job, a socket folder others may write, a flood of half-sent
requests from one ordinary user (bounded: a few hundred connections, on the local Unix socket only),
nested and non-ASCII input.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.agent_server import (
    SOCKET_GID,
    USER_UID,
    RunningAgent,
    agent_for_users,
    as_user,
    needs_root,
    needs_user_python,
    raw_request,
    start_agent,
    start_holder,
    stop_agent,
    wait_free,
)
from wattwise.agent.audit import AUDIT_NAME
from wattwise.agent.connections import CONNECTION_DEADLINE_S, MAX_CONNECTIONS_PER_UID
from wattwise.devices import NoPermissionError
from wattwise.devices.agent import TIMEOUT_S


def _limit_on_disk(agent: RunningAgent, index: int) -> float:
    return float(json.loads((agent.sim_dir / f"gpu{index}.json").read_text())["power_limit_w"])


def _audit(agent: RunningAgent) -> list[dict]:
    return [json.loads(line) for line in (agent.state_dir / AUDIT_NAME).read_text().splitlines()]


def test_a_live_holder_keeps_its_lease_and_limit_over_a_sigterm_and_a_sigkill_restart(tmp_path: Path) -> None:
    first = start_agent(tmp_path)
    holder = start_holder(first, 150, "bert", index=1)
    try:
        log = stop_agent(first)  # systemctl restart: SIGTERM, then a new agent
        assert _limit_on_disk(first, 1) == 150.0, log
        second = start_agent(tmp_path)
        gpu = second.gpu(1)
        assert gpu["power_limit_w"] == 150.0
        assert gpu["holder"] == {"pid": holder.pid, "uid": os.getuid(), "job": "bert", "job_id": "", "pgid": None}
        second.proc.kill()  # a crash this time
        second.proc.wait()
        third = start_agent(tmp_path)
        try:
            assert third.gpu(1)["holder"] == {
                "pid": holder.pid,
                "uid": os.getuid(),
                "job": "bert",
                "job_id": "",
                "pgid": None,
            }
            assert third.gpu(1)["power_limit_w"] == 150.0
            with pytest.raises(NoPermissionError, match=f"GPU 1 is held by pid {holder.pid}"):
                third.client.set_power_limit(1, 250.0, "intruder")
            holder.kill()  # the kept lease is watched like any other: its end restores the GPU at once
            holder.wait()
            wait_free(third, 1)
            assert third.gpu(1)["power_limit_w"] == 300.0
        finally:
            stop_agent(third)
        lines = _audit(third)
        assert [(a["setting"], a["old"], a["new"], a["why"]) for a in lines] == [
            ("power_limit_w", 300.0, 150.0, "requested"),
            ("power_limit_w", 150.0, 300.0, "holder ended"),
        ]  # the restarts changed nothing (the GPU kept 150 W): no line says they did
        assert all(
            a["pid"] == holder.pid and a["uid"] == os.getuid() and a["job"] == "bert" and a["gpu_index"] == 1
            for a in lines
        )
        assert (third.state_dir / AUDIT_NAME).stat().st_mode & 0o777 == 0o600
    finally:
        holder.kill()
        holder.wait()


def test_a_journalled_holder_whose_pid_now_names_another_process_is_not_trusted(tmp_path: Path) -> None:
    first = start_agent(tmp_path)
    holder = start_holder(first, 150, "bert")
    try:
        stop_agent(first)
        journal = first.state_dir / "journal.json"
        content = json.loads(journal.read_text())
        for change in content["changes"]:
            change["holder"]["start_ticks"] += 1  # same pid, another start: a reused pid
        journal.write_text(json.dumps(content))
        second = start_agent(tmp_path)
        try:
            assert second.gpu(0)["holder"] is None and second.gpu(0)["power_limit_w"] == 300.0
        finally:
            log = stop_agent(second)
        assert "restored after a crash: GPU 0: power limit 300 W" in log
    finally:
        holder.kill()
        holder.wait()


def _serve_fails(tmp_path: Path, sock: Path) -> str:
    proc = subprocess.run(
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
            str(tmp_path / "state"),
            "--simulated-dir",
            str(tmp_path / "sim"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0, proc.stderr
    assert not sock.exists()
    return proc.stderr


def test_a_socket_folder_others_may_write_or_that_is_a_link_is_refused(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o1777)  # even sticky, like /tmp
    err = _serve_fails(tmp_path, open_folder / "agent.sock")
    assert "is writable by group or others (mode 0o1777)" in err and "/run/wattwise" in err
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real").mkdir()
    err = _serve_fails(tmp_path, tmp_path / "link" / "agent.sock")
    assert "is not a folder (a symbolic link or a file)" in err


@needs_root
def test_a_socket_folder_owned_by_an_ordinary_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, USER_UID, SOCKET_GID)
    err = _serve_fails(tmp_path, theirs / "agent.sock")
    assert f"is owned by uid {USER_UID}, not by you (uid 0)" in err


def _request(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        "\r\nConnection: close\r\n\r\n"
    ).encode() + body


def test_nested_and_non_ascii_input_is_refused_with_400_or_404_and_changes_nothing(tmp_path: Path) -> None:
    running = start_agent(tmp_path)
    try:
        cases = [
            ("/v1/gpus/0/power_limit", b"[" * 60_000, 400, "nested too deeply"),
            ("/v1/gpus/0/power_limit", b'{"a":' * 10_000 + b"1" + b"}" * 10_000, 400, "nested too deeply"),
            ("/v1/gpus/%C2%B2/power_limit", b'{"watts": 200}', 404, "no GPU"),  # superscript two
            ("/v1/gpus/%D9%A1/power_limit", b'{"watts": 200}', 404, "no GPU"),  # Arabic-Indic one
            ("/v1/gpus/%EF%BC%91/release", b"", 404, "no GPU"),  # fullwidth one
        ]
        for path, body, status, message in cases:
            answer = raw_request(running, _request(path, body)).decode(errors="replace")
            assert answer.startswith(f"HTTP/1.1 {status}"), (path, answer[:300])
            assert message in answer, answer[:300]
        assert [g["power_limit_w"] for g in running.client.status()["gpus"]] == [300.0, 300.0]
        assert [g["holder"] for g in running.client.status()["gpus"]] == [None, None]
    finally:
        log = stop_agent(running)
    assert "Traceback" not in log and "RecursionError" not in log


#: Opens N connections as fast as it can, each sending half a header and never the rest; prints how many
#: the agent let stay open, then how long the longest-lived admitted one stayed open before it was closed.
FLOOD = """
import socket, sys, time
path, count = sys.argv[1], int(sys.argv[2])
conns = []
for _ in range(count):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(b"POST /v1/gpus/0/power_limit HTTP/1.1\\r\\nHost: x\\r\\nContent-Le")
    except OSError:
        s.close()
        continue
    conns.append(s)
time.sleep(1.0)
start = time.monotonic()
alive = []
for s in conns:
    s.setblocking(False)
    try:
        s.recv(1)  # b"" or a reset: the agent closed it
    except BlockingIOError:
        alive.append(s)  # nothing to read yet: the agent keeps it open
    except OSError:
        pass
print(len(alive), flush=True)
for s in alive:
    s.setblocking(True)
    s.settimeout(60)
    try:
        s.recv(1)
    except OSError:
        pass
print(round(time.monotonic() - start + 1.0, 1), flush=True)
"""


@needs_root
@needs_user_python
def test_a_flood_of_half_sent_requests_from_one_user_is_bounded_and_root_is_still_served() -> None:
    with agent_for_users() as (running, _):
        flood = as_user(
            USER_UID,
            SOCKET_GID,
            running,
            ["-c", FLOOD, str(running.socket), "400"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert flood.stdout is not None
        kept = int(flood.stdout.readline())
        assert 0 < kept <= MAX_CONNECTIONS_PER_UID  # the rest were closed at once
        started = time.monotonic()
        assert len(running.client.status()["gpus"]) == 2  # root, during the flood
        assert time.monotonic() - started < 5.0
        longest_s = float(flood.stdout.readline())
        flood.wait(timeout=60)
        assert longest_s <= CONNECTION_DEADLINE_S + 3.0  # a half-sent header is not kept open for minutes
        assert running.client.status()["gpus"][0]["holder"] is None
        running.proc.send_signal(signal.SIGTERM)
        _, err = running.proc.communicate(timeout=30)
    log = err.decode()
    assert "Traceback" not in log
    assert len(log.splitlines()) < 40, log[-3000:]
    assert f"uid {USER_UID} has {MAX_CONNECTIONS_PER_UID} connections open" in log


#: A group member connecting and closing in a tight loop, sending nothing, for ARGV[2] seconds: it keeps
#: the agent's listen backlog full. Prints "flooding" once it has started, then how many connects it made.
CONNECT_LOOP = """
import socket, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
end, n = time.monotonic() + seconds, 0
print("flooding", flush=True)
while time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
        n += 1
    except OSError:
        pass
    s.close()
print(n, flush=True)
"""


@needs_root
@needs_user_python
def test_a_connect_and_close_loop_of_one_user_starves_no_other_client() -> None:
    with agent_for_users() as (agent, _):
        _connect_loop_leaves_root_served(agent)
        agent.proc.send_signal(signal.SIGTERM)
        agent.proc.communicate(timeout=30)


def _connect_loop_leaves_root_served(agent: RunningAgent) -> None:
    loops = [
        as_user(USER_UID, SOCKET_GID, agent, ["-c", CONNECT_LOOP, str(agent.socket), "4"], stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        for loop in loops:
            assert loop.stdout is not None and loop.stdout.readline().strip() == "flooding"
        answered, slowest_s = 0, 0.0
        for _ in range(10):  # as root's `wattwise agent status`, a job's `wattwise cap`, the epilog would
            started = time.monotonic()
            answered += len(agent.client.status()["gpus"]) == 2
            slowest_s = max(slowest_s, time.monotonic() - started)
        assert answered == 10
        assert slowest_s < TIMEOUT_S  # within the client's deadline: it waits for its turn, it does not give up
    finally:
        for loop in loops:
            loop.wait(timeout=30)
    assert all(int(loop.stdout.read().strip() or 0) > 0 for loop in loops if loop.stdout is not None)


#: A user's process asking the agent for a power limit on GPU ARGV[1]: prints the answer's limit, or the refusal.
HOLD = """
import sys
from wattwise.devices.agent import AgentClient
from wattwise.devices.base import DeviceError
try:
    print(AgentClient().set_power_limit(int(sys.argv[1]), 150.0, "squat")["power_limit_w"], flush=True)
except DeviceError as err:
    print("refused:", err, flush=True)
"""


@needs_root
@needs_user_python
def test_a_user_whose_job_was_given_another_gpu_cannot_squat_a_free_one() -> None:
    with agent_for_users() as (agent, home):
        register = subprocess.run(
            [
                sys.executable,
                "-m",
                "wattwise",
                "agent",
                "register-job",
                "--socket",
                str(agent.socket),
                "--job",
                "4711",
                "--uid",
                str(USER_UID),
                "--gpus",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert register.returncode == 0, register.stderr
        answers = {}
        for index in (0, 1):
            proc = as_user(
                USER_UID,
                SOCKET_GID,
                agent,
                ["-c", HOLD, str(index)],
                home=home,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = proc.communicate(timeout=60)
            answers[index] = out.strip() or err
        assert answers[0].startswith(
            f"refused: wattwise agent: GPU 0 is outside the allocation of uid {USER_UID} (job 4711: GPU(s) 1)"
        )
        assert answers[1] == "150.0"  # the job's own GPU; its process ended, so the agent restores it at once
        assert agent.gpu(0)["holder"] is None and agent.gpu(0)["power_limit_w"] == 300.0
        ended = subprocess.run(
            [sys.executable, "-m", "wattwise", "agent", "end-job", "--socket", str(agent.socket), "--job", "4711"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ended.returncode == 0 and "job 4711: ended" in ended.stderr
        assert agent.client.status()["jobs"] == []


def test_sighup_reads_the_config_again_and_the_agent_keeps_serving(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text("power_limits:\n  - {model: simulated, floor_w: 100}\n")
    agent = start_agent(tmp_path, "--config", str(config))
    try:
        assert agent.gpu(0)["allowed_power_limit_w"] == [100.0, 300.0]
        config.write_text("power_limits:\n  - {model: simulated, floor_w: 200}\n")
        agent.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while agent.gpu(0)["allowed_power_limit_w"] != [200.0, 300.0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.gpu(0)["allowed_power_limit_w"] == [200.0, 300.0]  # the new floor, without a restart
        with pytest.raises(NoPermissionError, match="outside the range the admin allows"):
            agent.client.set_power_limit(0, 150.0, "bert")
        config.write_text("power_limits: [oops\n")  # a broken file keeps the config in force
        agent.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert agent.proc.poll() is None and agent.gpu(0)["allowed_power_limit_w"] == [200.0, 300.0]
    finally:
        log = stop_agent(agent)
    assert "SIGHUP: read" in log and "the config in force is kept" in log and "Traceback" not in log
