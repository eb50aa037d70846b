"""The SLURM epilog against what a job leaves: a `wattwise cap` command's process group, a stopped agent.

The agent serves simulated GPUs; the job's processes run as this test's user with SLURM_JOB_ID in their
environment, as slurmd starts them; the epilog runs as slurmd would (`deploy/slurm/epilog.sh`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.agent_server import RunningAgent, start_agent, stop_agent

REPO_ROOT = Path(__file__).resolve().parents[3]


def _epilog(agent: RunningAgent, job: str, **env: str) -> subprocess.CompletedProcess[str]:
    wattwise = shutil.which("wattwise") or str(REPO_ROOT / ".venv" / "bin" / "wattwise")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "WATTWISE"))}
    return subprocess.run(
        ["bash", str(REPO_ROOT / "deploy" / "slurm" / "epilog.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **base,
            "WATTWISE": wattwise,
            "WATTWISE_AGENT_SOCKET": str(agent.socket),
            "WATTWISE_AGENT_STATE_DIR": str(agent.state_dir),
            "SLURM_JOB_ID": job,
            "SLURM_JOB_UID": str(os.getuid()),
            **env,
        },
    )


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_epilog_signals_the_whole_process_group_a_caps_lease_follows(tmp_path: Path) -> None:
    agent = start_agent(tmp_path)
    try:
        env = {**agent.env(), "SLURM_JOB_ID": "77"}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        # The command starts its work in the background and exits: the lease follows its process group.
        cap_args = ["cap", "--backend", "agent", "--watts", "200", "--gpus", "0"]
        cap = subprocess.run(
            [sys.executable, "-m", "wattwise", *cap_args, "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cap.returncode == 0, cap.stderr
        worker = int(cap.stdout.split()[0])
        assert _running(worker) and agent.gpu(0)["holder"]["pgid"] is not None
        done = _epilog(agent, "77", WATTWISE_EPILOG_GRACE_S="5")
        assert done.returncode == 0, done.stderr
        assert "and process group(s)" in done.stderr and done.stderr.rstrip().endswith("released")
        deadline = time.monotonic() + 10
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker)  # the work the cap outlived is ended too, not left running uncapped
        assert agent.gpu(0)["holder"] is None and agent.gpu(0)["power_limit_w"] == 300.0
    finally:
        stop_agent(agent)


def test_the_epilog_fails_in_one_line_while_a_stopped_agent_leaves_a_live_cap_of_the_job(tmp_path: Path) -> None:
    agent = start_agent(tmp_path)
    env_holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_IN_JOB, str(agent.socket)],
        env={**os.environ, "SLURM_JOB_ID": "78"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert env_holder.stdout is not None and env_holder.stdout.readline().strip() == "held"
        stop_agent(agent)  # a clean stop: the live holder keeps its cap, journalled for the next start
        done = _epilog(agent, "78")
        assert done.returncode == 1
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("wattwise epilog (job 78): the node agent at ")
        assert f"is stopped and the job's running processes still hold GPU 1 (pid {env_holder.pid})" in line
        other = _epilog(agent, "79")  # another job: nothing of it is held
        assert other.returncode == 0 and "no node agent" in other.stderr
    finally:
        env_holder.send_signal(signal.SIGKILL)
        env_holder.wait()


HOLD_IN_JOB = """
import sys, time
from wattwise.devices.agent import AgentClient
AgentClient(sys.argv[1]).set_power_limit(1, 200.0, "bert")
print("held", flush=True)
time.sleep(300)
"""


def test_a_job_that_ends_while_the_agent_is_stopped_loses_its_registration_when_the_agent_starts(
    tmp_path: Path,
) -> None:
    agent = start_agent(tmp_path)
    try:
        agent.client.register_job("80", 4321, [0])
        assert [j["job_id"] for j in agent.client.status()["jobs"]] == ["80"]
    finally:
        stop_agent(agent)
    done = _epilog(agent, "80", SLURM_JOB_UID="4321")  # no agent answers: the epilog leaves a record
    assert done.returncode == 0 and "no node agent" in done.stderr
    again = start_agent(tmp_path)
    try:
        assert again.client.status()["jobs"] == []
    finally:
        err = stop_agent(again)
    assert "job 80 of uid 4321 ended while the agent was not answering" in err
