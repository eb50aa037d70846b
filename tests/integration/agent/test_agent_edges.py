"""The agent's and its commands' edges: a metrics port in use, a GPU the node does not have, Ctrl-C."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.agent_server import start_agent, start_holder


def test_a_metrics_port_in_use_is_named_in_one_line_and_the_agent_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = ["agent", "serve", "--socket", str(tmp_path / "run" / "agent.sock"), "--backend", "simulated"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "wattwise",
                *serve,
                "--state-dir",
                str(tmp_path / "state"),
                "--metrics-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"wattwise agent: error: --metrics-port {port}: cannot listen on 127.0.0.1:{port} (")
    assert "choose another port" in line and "check the paths" not in line
    assert not (tmp_path / "run" / "agent.sock").exists()


def test_restore_with_the_agents_journal_dir_puts_back_what_a_sigkilled_agent_left(tmp_path: Path) -> None:
    agent = start_agent(tmp_path)  # its simulated GPUs' state folder lies outside its state dir
    agent.client.register_job("81", 4321, [0])  # its record of jobs is no journal for restore to read
    holder = start_holder(agent, 150, "bert", index=1)
    agent.proc.kill()  # the agent dies; its holder too, while no agent watches
    agent.proc.wait()
    holder.kill()
    holder.wait()
    state = json.loads((agent.sim_dir / "gpu1.json").read_text())
    assert state["power_limit_w"] == 150.0
    done = subprocess.run(
        [sys.executable, "-m", "wattwise", "restore", "--journal-dir", str(agent.state_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "restored simulated device 1: power_limit_w -> 300.0" in done.stdout
    assert json.loads((agent.sim_dir / "gpu1.json").read_text())["power_limit_w"] == 300.0
    assert not (agent.state_dir / "journal.json").exists()
    assert json.loads((agent.state_dir / "jobs" / "registered.json").read_text())["jobs"][0]["job_id"] == "81"


def test_the_daemonset_passes_a_config_its_configmap_holds_with_the_cgroup_policy() -> None:
    import yaml

    from wattwise.agent.config import parse_config

    deploy = Path(__file__).resolve().parents[3] / "deploy"
    spec = yaml.safe_load((deploy / "wattwise-agent-daemonset.yaml").read_text())["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config_path = Path(container["args"][container["args"].index("--config") + 1])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    config_map = yaml.safe_load((deploy / "wattwise-agent-config.yaml").read_text())
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == volume["configMap"]["name"]
    config = parse_config(yaml.safe_load(config_map["data"][config_path.name]))
    assert config.allocation == "cgroup"
    assert config.allowed_gids == {int(container["args"][container["args"].index("--group") + 1])}


SIGINT_DURING_HAND_OVER = """
import os, signal
from wattwise.cli.measure import _run_command

started = []

def interrupted_during_hand_over(pid):  # `wattwise cap` hands the GPUs' leases over here
    started.append(pid)
    os.kill(os.getpid(), signal.SIGINT)

code = _run_command(["sleep", "30"], started=interrupted_during_hand_over, own_group=True)
try:
    os.kill(started[0], 0)
    print(code, "command still running")
except ProcessLookupError:
    print(code, "command ended")
"""


def test_a_sigint_while_the_command_is_handed_its_gpus_reaches_the_command() -> None:
    done = subprocess.run([sys.executable, "-c", SIGINT_DURING_HAND_OVER], capture_output=True, text=True, timeout=60)
    # The command got the signal and ended; `wattwise cap` then exits 130 (128 + SIGINT).
    assert (done.returncode, done.stdout.strip()) == (0, "-2 command ended"), done.stderr
