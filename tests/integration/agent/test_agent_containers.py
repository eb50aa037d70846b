"""Jobs in containers: their own PID namespace (`unshare --pid`) and a device cgroup (`allocation: cgroup`).

One agent serves two simulated GPUs under `allocation: cgroup`; each GPU has a device node beside its
state file (`gpuN.json.dev`, made with mknod, standing for `/dev/nvidiaN`). A container is simulated as the
kernel makes one: `unshare --pid --fork` for its PID namespace, a v1 `devices` cgroup denying one node.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_server import (
    SOCKET_GID,
    USER_UID,
    RunningAgent,
    as_user,
    needs_root,
    needs_user_python,
    start_agent,
    stop_agent,
)

#: The devices cgroup hierarchy (cgroup v1), where a test can make a cgroup and deny it a device node.
DEVICES = Path("/sys/fs/cgroup/devices")
#: The major number of NVIDIA's device nodes: no driver here, so only the device cgroup decides an open.
NVIDIA_MAJOR = 195


def _unshare_why_not() -> str | None:
    if shutil.which("unshare") is None:
        return "needs util-linux's unshare"
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare --pid cannot run here ({err})"
    return None if done.returncode == 0 else f"unshare --pid is not permitted here: {done.stderr.decode().strip()}"


@pytest.fixture(scope="module")
def agent() -> Iterator[RunningAgent]:
    if os.geteuid() != 0:
        pytest.skip("needs root to start the agent, make device nodes and run clients as other users")
    base = Path(tempfile.mkdtemp(prefix="wattwise-agent-"))  # traversable by others, unlike pytest's tmp dirs
    os.chmod(base, 0o755)
    config = base / "agent.yaml"
    config.write_text(f"allowed_groups: [{SOCKET_GID}]\nallocation: cgroup\n")
    (base / "sim").mkdir()
    for index in (0, 1):
        os.mknod(base / "sim" / f"gpu{index}.json.dev", 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
    running = start_agent(base, "--config", str(config), "--group", str(SOCKET_GID))
    try:
        yield running
    finally:
        stop_agent(running)
        shutil.rmtree(base, ignore_errors=True)


#: The command `wattwise cap` runs: its pid in the agent's namespace (first of NSpid) and GPU 0's holder.
PEEK = """
import json
from wattwise.devices.agent import AgentClient
nspid = [int(n) for n in next(l for l in open("/proc/self/status") if l.startswith("NSpid:")).split()[1:]]
print(json.dumps({"nspid": nspid, "holder": AgentClient().status()["gpus"][0]["holder"]}), flush=True)
"""


@needs_root
def test_cap_in_its_own_pid_namespace_hands_the_lease_to_its_command(agent: RunningAgent) -> None:
    why_not = _unshare_why_not()
    if why_not:
        pytest.skip(why_not)
    env = agent.env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    cap = ["-m", "wattwise", "cap", "--backend", "agent", "--watts", "200", "--gpus", "0"]
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--", sys.executable, *cap, "--", sys.executable, "-c", PEEK],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[0])
    assert len(seen["nspid"]) == 2  # the command runs in a PID namespace of its own: two numbers
    assert seen["holder"]["pid"] == seen["nspid"][0]  # the agent names it by its own pid for it
    assert "stays capped only while this wrapper runs" not in done.stderr
    assert agent.gpu(0)["holder"] is None and agent.gpu(0)["power_limit_w"] == 300.0


#: A user's process: waits until the test has put it into its cgroup, then asks for 150 W on each GPU.
HOLD_EACH = """
import sys
from wattwise.devices.agent import AgentClient
from wattwise.devices.base import DeviceError
sys.stdin.readline()
for index in (0, 1):
    try:
        print(AgentClient().set_power_limit(index, 150.0, "pod")["power_limit_w"], flush=True)
    except DeviceError as err:
        print("refused:", err, flush=True)
"""


@needs_root
@needs_user_python
def test_under_the_cgroup_policy_a_user_changes_only_the_gpus_its_device_cgroup_may_open(
    agent: RunningAgent,
) -> None:
    if not (DEVICES / "devices.deny").exists():
        pytest.skip("needs a cgroup v1 devices hierarchy to make a cgroup that denies a device node")
    cgroup = DEVICES / f"wattwise-test-{os.getpid()}"
    cgroup.mkdir()
    try:
        (cgroup / "devices.deny").write_text(f"c {NVIDIA_MAJOR}:1 rwm\n")  # the container was given GPU 0 only
        proc = as_user(
            USER_UID,
            SOCKET_GID,
            agent,
            ["-c", HOLD_EACH],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        (cgroup / "cgroup.procs").write_text(str(proc.pid))
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        for pid in (cgroup / "cgroup.procs").read_text().split():
            (DEVICES / "cgroup.procs").write_text(pid)
        cgroup.rmdir()
    answers = out.splitlines()
    assert answers[0] == "150.0", err  # its own GPU; its process ended, so the agent restored it
    assert answers[1].startswith(f"refused: wattwise agent: GPU 1 is outside the allocation of pid {proc.pid} ")
    assert f"its device cgroup {cgroup} may not open {agent.sim_dir / 'gpu1.json.dev'}" in answers[1]
    assert [(g["power_limit_w"], g["holder"]) for g in agent.client.status()["gpus"]] == [(300.0, None)] * 2
