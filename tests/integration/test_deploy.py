"""deploy/: what an admin copies onto a node must start the agent as written.

No container runtime or Kubernetes runs here, so the files are checked for what would break them on a
node: the systemd unit passes `systemd-analyze verify`, and every command line they give (the unit's
ExecStart with its defaults file, the DaemonSet's args, the Containerfile's ENTRYPOINT and CMD) parses with
`wattwise agent serve`'s own parser and names the paths the others mount. The Containerfile copies
everything a wheel is built from (tests/integration/test_packaging.py builds one from the same set). The Grafana
dashboard's queries run against a real Prometheus in tests/integration/agent/test_agent.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import ordinary_user
from tests.support.paths import PACKAGE_ROOTS, REPO_ROOT
from wattwise.agent import DEFAULT_SOCKET, DEFAULT_STATE_DIR
from wattwise.agent.config import parse_config
from wattwise.agent.serve import allocation_warning
from wattwise.cli import agent as agent_cli
from wattwise.devices import DeviceError
from wattwise.devices.agent import AgentClient
from wattwise.vocabulary import AllocationPolicy

DEPLOY = REPO_ROOT / "deploy"
#: The files a wheel of wattwise is built from (besides the package folders).
BUILD_FILES = {"pyproject.toml", "README.md", "pth_build.py"}


def _serve_args(argv: list[str]) -> argparse.Namespace:
    """`wattwise agent serve ARGV` as the command line parses it (argparse exits 2 on a bad flag)."""
    parser = argparse.ArgumentParser(prog="wattwise")
    agent_cli.register(parser.add_subparsers(dest="subcommand"))
    return parser.parse_args(["agent", "serve", *argv])


def _unit() -> dict[str, list[str]]:
    """The unit's keys (a key may repeat), continuation lines joined."""
    text = (DEPLOY / "wattwise-agent.service").read_text().replace("\\\n", " ")
    keys: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), []).append(value.strip())
    return keys


def _defaults() -> dict[str, str]:
    values = {}
    for line in (DEPLOY / "wattwise-agent.default").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key] = value.strip('"')
    return values


ADMIN_PAGE = REPO_ROOT / "docs" / "admin.md"


def _documented_command_line() -> str:
    """The agent's command line the admin page says the unit runs (the one `text` block of its install section)."""
    section = ADMIN_PAGE.read_text().split("### Install the agent with systemd", 1)[1].split("\n### ", 1)[0]
    (line,) = re.findall(r"```text\n(.*?)\n```", section, flags=re.S)
    return str(line)


def _expanded_exec_start() -> list[str]:
    """The unit's ExecStart as systemd runs it with the defaults file."""
    (exec_start,) = _unit()["ExecStart"]
    defaults = _defaults()
    words = [w.replace("${WATTWISE_AGENT_GROUP}", defaults["WATTWISE_AGENT_GROUP"]) for w in shlex.split(exec_start)]
    return [
        x for w in words for x in (shlex.split(defaults["WATTWISE_AGENT_OPTS"]) if w == "$WATTWISE_AGENT_OPTS" else [w])
    ]


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no `systemd-analyze` (Debian: apt-get install systemd)"
)
def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    # The unit as the admin page installs it, with the command line the page says it runs; verify checks
    # that ExecStart's program exists: point it at this checkout's `wattwise`.
    program = shutil.which("wattwise") or str(Path(REPO_ROOT / ".venv" / "bin" / "wattwise"))
    text = (DEPLOY / "wattwise-agent.service").read_text()
    text = re.sub(r"^ExecStart=.*?[^\\]\n", f"ExecStart={_documented_command_line()}\n", text, flags=re.M | re.S)
    unit = tmp_path / "wattwise-agent.service"
    unit.write_text(text.replace("/usr/local/bin/wattwise", program))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # Unknown keys and bad values are warnings on stderr with exit 0: any line about the unit is a fault.
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if unit.name in line]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr


def test_the_units_command_line_with_its_defaults_parses_and_uses_the_folders_systemd_makes() -> None:
    unit, defaults = _unit(), _defaults()
    (exec_start,) = unit["ExecStart"]
    program, command, subcommand, *argv = shlex.split(exec_start)
    assert program.endswith("/wattwise") and (command, subcommand) == ("agent", "serve")
    # The example options in the defaults file's comment must parse too.
    (example,) = re.findall(r'WATTWISE_AGENT_OPTS="([^"]+)"', (DEPLOY / "wattwise-agent.default").read_text())
    for opts in (defaults["WATTWISE_AGENT_OPTS"], example):
        expanded = [a.replace("${WATTWISE_AGENT_GROUP}", defaults["WATTWISE_AGENT_GROUP"]) for a in argv]
        expanded = [word for a in expanded for word in (shlex.split(opts) if a == "$WATTWISE_AGENT_OPTS" else [a])]
        args = _serve_args(expanded)
        assert args.backend == "nvml" and args.group == "gpu-power"
    assert args.socket == DEFAULT_SOCKET and args.state_dir == DEFAULT_STATE_DIR
    # systemd creates /run/wattwise and /var/lib/wattwise-agent (0700) for the agent.
    assert unit["RuntimeDirectory"] == [Path(DEFAULT_SOCKET).parent.name]
    assert unit["StateDirectory"] == [Path(DEFAULT_STATE_DIR).name] and unit["StateDirectoryMode"] == ["0700"]
    # Hardened, but with what NVML and handing the socket to its group need.
    caps = unit["CapabilityBoundingSet"][0].split()
    assert {"CAP_SYS_ADMIN", "CAP_CHOWN"} <= set(caps)
    assert unit["NoNewPrivileges"] == ["yes"] and unit["ProtectSystem"] == ["strict"]
    assert unit["KillSignal"] == ["SIGTERM"]  # SIGTERM restores every held GPU


def test_the_example_agent_config_loads_with_bounds_for_its_models() -> None:
    data = yaml.safe_load((DEPLOY / "agent.example.yaml").read_text())
    # The group the defaults file gives the socket; names are looked up when loaded, so use this machine's.
    assert data["allowed_groups"] == [_defaults()["WATTWISE_AGENT_GROUP"]]
    config = parse_config({**data, "allowed_groups": [os.getgid()]}, "agent.example.yaml")
    assert config.allows(os.getuid() or 1000, {os.getgid()})
    floor_w, ceiling_w = config.power_bounds("NVIDIA H100 80GB HBM3")
    assert floor_w is not None and ceiling_w is not None and floor_w < ceiling_w
    assert config.sm_clock_mhz is not None and config.sm_clock_mhz[0] < config.sm_clock_mhz[1]
    # The node the install steps make enforces who may change which GPU: `none` is a choice made by hand.
    assert config.allocation in (AllocationPolicy.REGISTERED, AllocationPolicy.CGROUP)
    assert allocation_warning(config, "agent.example.yaml") is None
    configmap = yaml.safe_load((DEPLOY / "wattwise-agent-config.yaml").read_text())
    in_pods = parse_config(yaml.safe_load(configmap["data"]["agent.yaml"]), "wattwise-agent-config.yaml")
    assert in_pods.allocation == AllocationPolicy.CGROUP


def test_the_daemonset_runs_the_agent_on_the_hosts_socket_folder_privileged_with_host_pids() -> None:
    manifest = yaml.safe_load((DEPLOY / "wattwise-agent-daemonset.yaml").read_text())
    assert manifest["kind"] == "DaemonSet" and manifest["apiVersion"] == "apps/v1"
    spec = manifest["spec"]["template"]["spec"]
    assert spec["hostPID"] is True  # callers are named by pid and watched through /proc
    (container,) = spec["containers"]
    assert container["securityContext"]["privileged"] is True
    args = _serve_args(container["args"])
    assert args.backend == "nvml" and args.socket == DEFAULT_SOCKET
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    # The socket's folder and the journal are the host's, so jobs reach it and a restarted pod finds it.
    for path in (str(Path(args.socket).parent), args.state_dir):
        (name,) = [n for n, mount in mounts.items() if mount == path]
        assert host[name] == path
    assert args.metrics_port in [p["containerPort"] for p in container["ports"]]
    assert (
        manifest["spec"]["selector"]["matchLabels"].items()
        <= manifest["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_containerfile_copies_what_a_wheel_is_built_from_and_starts_the_agent() -> None:
    lines = (DEPLOY / "Containerfile").read_text().replace("\\\n", " ").splitlines()
    copied = {src.rstrip("/") for line in lines if line.startswith("COPY ") for src in shlex.split(line)[1:-1]}
    assert copied >= BUILD_FILES
    for root in PACKAGE_ROOTS:  # each package's folder is copied, itself or a folder above it (core/)
        assert any(root == name or root.startswith(f"{name}/") for name in copied), root
    for name in copied:
        assert (REPO_ROOT / name).exists(), name
    (entrypoint,) = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("ENTRYPOINT ")]
    (cmd,) = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("CMD ")]
    assert entrypoint == ["wattwise", "agent", "serve"]
    # The lean install: the agent extra, no torch or framework.
    (install,) = [line for line in lines if line.startswith("RUN ") and "pip install" in line]
    assert "'.[agent]'" in shlex.split(install, posix=False) and "torch" not in install
    args = _serve_args(cmd)
    assert args.socket == DEFAULT_SOCKET and args.state_dir == DEFAULT_STATE_DIR and args.backend == "nvml"


def test_the_unit_filters_system_calls_and_allows_only_the_gpu_device_nodes() -> None:
    unit = _unit()
    assert unit["SystemCallFilter"] == ["@system-service"]
    assert unit["DevicePolicy"] == ["closed"]
    allowed = {value.split()[0] for value in unit["DeviceAllow"]}
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "char-nvidia-frontend"} <= allowed  # frontend: /dev/nvidiaN
    text = (DEPLOY / "wattwise-agent.service").read_text()
    assert "#DeviceAllow=/dev/kfd rw" in text and "#DeviceAllow=char-drm rw" in text  # AMD, in a comment


def test_the_admin_pages_install_steps_make_the_group_install_the_config_and_run_the_units_command_line() -> None:
    page = ADMIN_PAGE.read_text()
    section = page.split("### Install the agent with systemd", 1)[1].split("\n### ", 1)[0]
    (steps,) = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)
    commands = [line.split("#")[0].strip() for line in steps.splitlines()]
    group = _defaults()["WATTWISE_AGENT_GROUP"]
    config = _serve_args(_expanded_exec_start()[3:]).config
    assert "/opt/wattwise/bin/pip install '.[agent]'" in commands  # the lean install
    assert "ln -s /opt/wattwise/bin/wattwise /usr/local/bin/wattwise" in commands  # where ExecStart finds it
    assert f"groupadd --system {group}" in commands
    assert any(c.startswith(f"usermod -aG {group} ") for c in commands)
    assert "log in again" in section
    assert f"install -D -m 0644 deploy/agent.example.yaml {config}" in commands
    assert "install -m 0644 deploy/wattwise-agent.default /etc/default/wattwise-agent" in commands
    assert "systemctl enable --now wattwise-agent" in commands
    # The command line the page shows is the unit's, word for word.
    assert shlex.split(_documented_command_line()) == _expanded_exec_start()


def test_one_metrics_port_throughout_the_docs_and_deploy_files() -> None:
    ports: dict[str, set[str]] = {}
    texts = {
        p: p.read_text()
        for p in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")), *sorted(DEPLOY.iterdir())]
        if p.is_file()
    }
    for path, text in texts.items():
        for port in re.findall(
            r"--metrics-port[\s\",]+(\d+)|prometheus\.io/port: \"(\d+)\"|127\.0\.0\.1:(\d+)\"\]", text
        ):
            ports.setdefault(next(p for p in port if p), set()).add(str(path.relative_to(REPO_ROOT)))
    assert list(ports) == ["9402"], ports


def test_the_daemonset_uses_the_nvidia_runtime_probes_the_socket_and_is_scraped() -> None:
    manifest = yaml.safe_load((DEPLOY / "wattwise-agent-daemonset.yaml").read_text())
    template = manifest["spec"]["template"]
    spec = template["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    (container,) = spec["containers"]
    args = _serve_args(container["args"])
    for probe in ("readinessProbe", "livenessProbe"):
        program, *argv = container[probe]["exec"]["command"]
        assert program == "wattwise"
        parser = argparse.ArgumentParser(prog="wattwise")
        agent_cli.register(parser.add_subparsers(dest="subcommand"))
        probed = parser.parse_args(argv)
        assert (probed.agent_command, probed.socket) == ("status", args.socket), probe
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == args.metrics_port and args.metrics_host == "0.0.0.0"


def test_the_grafana_dashboard_asks_for_its_prometheus_data_source_on_import() -> None:
    board = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    (source,) = board["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    uids: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("datasource"), dict):
                uids.append(node["datasource"]["uid"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in board.items() if k != "__inputs"})
    assert len(uids) >= len(board["panels"]) and set(uids) == {"${DS_PROMETHEUS}"}


# -- SLURM: the prolog and the epilog against a running agent on simulated GPUs --------------------------

#: Sets GPU argv[2]'s power limit through the agent as job argv[4], says so, and stays alive (a process that
#: outlived its job: SLURM_JOB_ID in its environment names the job). With argv[5], it names batch job argv[5]
#: to the agent only, not in the environment /proc shows (as a process the epilog cannot see would).
HOLDER = """
import os, sys, time
from wattwise.devices.agent import AgentClient
if len(sys.argv) > 5:
    os.environ["SLURM_JOB_ID"] = sys.argv[5]
AgentClient(sys.argv[1]).set_power_limit(int(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
print("held", flush=True)
time.sleep(300)
"""


@dataclass
class SlurmNode:
    """An agent serving 4 simulated GPUs, and the processes of jobs that hold some of them."""

    socket: Path
    holders: list[subprocess.Popen[str]]
    #: The jobs' user: an ordinary one (USER_UID) where the test runs as root and one can run wattwise.
    uid: int


@pytest.fixture()
def slurm_node() -> Iterator[SlurmNode]:
    as_user = ordinary_user.IS_ROOT and ordinary_user.why_not() is None
    with ordinary_user.shared_folder("wattwise-slurm-") as folder:
        socket_path = folder / "run" / "agent.sock"
        group = ["--group", str(ordinary_user.USER_GID)] if as_user else []
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wattwise",
                "agent",
                "serve",
                "--backend",
                "simulated",
                "--simulated-gpus",
                "4",
                "--socket",
                str(socket_path),
                "--state-dir",
                str(folder / "state"),
                *group,
            ],
            stderr=subprocess.DEVNULL,
        )
        node = SlurmNode(socket_path, [], ordinary_user.USER_UID if as_user else os.getuid())
        try:
            deadline = time.monotonic() + 60
            while not _answers(socket_path):
                assert agent.poll() is None and time.monotonic() < deadline, "the agent did not start"
                time.sleep(0.1)
            yield node
        finally:
            for proc in node.holders:
                proc.kill()
                proc.wait(timeout=30)
            agent.terminate()
            agent.wait(timeout=30)


def _answers(socket_path: Path) -> bool:
    try:
        AgentClient(socket_path).status()
    except DeviceError:
        return False
    return True


def _gpus(socket_path: Path) -> list[dict[str, Any]]:
    return list(AgentClient(socket_path).status()["gpus"])


def _hold(node: SlurmNode, index: int, slurm_job: str, *, seen: bool = True) -> int:
    """A process of job `slurm_job` (its user's) holding GPU `index` at 200 W.

    `seen`: SLURM_JOB_ID is in its environment (as /proc shows it); else it only tells the agent.
    """
    args = ["-c", HOLDER, str(node.socket), str(index), "200", f"job{slurm_job}", *([] if seen else [slurm_job])]
    env = {"SLURM_JOB_ID": slurm_job} if seen else {}
    if node.uid == os.getuid():
        base = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
        proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, env={**base, **env})
    else:
        proc = ordinary_user.popen_as(node.uid, ordinary_user.USER_GID, args, env=env, stdout=subprocess.PIPE)
    node.holders.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc.pid


def _slurm_script(name: str, socket_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """deploy/slurm/NAME.sh as slurmd runs it (root, SLURM_* set), with this checkout's `wattwise`."""
    wattwise = shutil.which("wattwise") or str(REPO_ROOT / ".venv" / "bin" / "wattwise")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "WATTWISE"))}
    return subprocess.run(
        ["bash", str(DEPLOY / "slurm" / f"{name}.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, "WATTWISE": wattwise, "WATTWISE_AGENT_SOCKET": str(socket_path), **env},
    )


def test_the_epilog_releases_what_a_finished_jobs_leftover_process_holds_and_nothing_of_another_job(
    slurm_node: SlurmNode,
) -> None:
    socket_path, holders, uid = slurm_node.socket, slurm_node.holders, slurm_node.uid
    default_w = _gpus(socket_path)[2]["default_power_limit_w"]
    leftover = _hold(slurm_node, 2, slurm_job="77")
    other = _hold(slurm_node, 3, slurm_job="78")  # the same user's job still running
    unseen = _hold(slurm_node, 1, slurm_job="77", seen=False)  # one /proc does not tie to job 77
    assert [g["power_limit_w"] for g in _gpus(socket_path)][1:] == [200.0, 200.0, 200.0]
    assert _gpus(socket_path)[1]["holder"]["job_id"] == "77"

    # Job 77's user is not this one: nothing of theirs is held, nothing is touched.
    proc = _slurm_script("epilog", socket_path, SLURM_JOB_ID="77", SLURM_JOB_UID=str(uid + 1))
    assert proc.returncode == 0 and proc.stderr == ""
    assert _gpus(socket_path)[2]["holder"]["pid"] == leftover

    proc = _slurm_script("epilog", socket_path, SLURM_JOB_ID="77", SLURM_JOB_UID=str(uid), WATTWISE_EPILOG_GRACE_S="5")
    assert proc.returncode == 0, proc.stderr
    assert f"GPU(s) 2 still held by the job's process(es) {leftover}; SIGTERM" in proc.stderr
    # The holder it cannot tie to the job through /proc is not signalled; the agent releases its GPU.
    assert "wattwise agent release --job 77: restored GPU(s) [1]" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("released") and str(unseen) not in proc.stderr
    gpus = _gpus(socket_path)
    assert gpus[2]["holder"] is None and gpus[2]["power_limit_w"] == default_w
    assert gpus[1]["holder"] is None and gpus[1]["power_limit_w"] == default_w
    assert holders[0].wait(timeout=10) == -signal.SIGTERM
    assert holders[2].poll() is None
    # Job 78 goes on capped.
    assert gpus[3]["holder"]["pid"] == other and gpus[3]["power_limit_w"] == 200.0
    assert holders[1].poll() is None


def test_the_prolog_names_the_jobs_gpus_that_are_held_and_fails_only_when_strict(
    slurm_node: SlurmNode, tmp_path: Path
) -> None:
    socket_path = slurm_node.socket
    holder = _hold(slurm_node, 1, slurm_job="77")

    proc = _slurm_script("prolog", socket_path, SLURM_JOB_ID="80", SLURM_JOB_GPUS="2,3")
    assert proc.returncode == 0 and proc.stderr == ""
    proc = _slurm_script("prolog", socket_path, SLURM_JOB_ID="80", SLURM_JOB_GPUS="0,1")
    assert proc.returncode == 0
    assert f"wattwise prolog (job 80): GPU 1 is held by pid {holder} (uid {slurm_node.uid}, job 'job77')" in proc.stderr
    proc = _slurm_script("prolog", socket_path, SLURM_JOB_ID="80", SLURM_JOB_GPUS="0,1", WATTWISE_PROLOG_STRICT="1")
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith("the job's GPUs are not all free")

    # A node without an agent: logged; a failure only when strict. The epilog has nothing to release.
    missing = tmp_path / "none.sock"
    assert _slurm_script("prolog", missing, SLURM_JOB_ID="80").returncode == 0
    assert _slurm_script("prolog", missing, SLURM_JOB_ID="80", WATTWISE_PROLOG_STRICT="1").returncode == 1
    proc = _slurm_script("epilog", missing, SLURM_JOB_ID="80", SLURM_JOB_UID="0")
    assert proc.returncode == 0 and "no node agent" in proc.stderr


def test_the_prolog_registers_the_jobs_gpus_and_the_epilog_ends_the_registration(slurm_node: SlurmNode) -> None:
    from wattwise.devices.agent import AgentClient

    client = AgentClient(slurm_node.socket)
    uid = str(slurm_node.uid + 7)  # a user with no process here: its job holds nothing
    proc = _slurm_script("prolog", slurm_node.socket, SLURM_JOB_ID="90", SLURM_JOB_UID=uid, SLURM_JOB_GPUS="2,3")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert [(j["uid"], j["gpus"]) for j in client.status()["jobs"] if j["job_id"] == "90"] == [(int(uid), [2, 3])]
    proc = _slurm_script("epilog", slurm_node.socket, SLURM_JOB_ID="90", SLURM_JOB_UID=uid)
    assert proc.returncode == 0, proc.stderr
    assert all(job["job_id"] != "90" for job in client.status()["jobs"])


def test_the_prolog_and_epilog_say_in_one_line_that_the_agent_does_not_answer(tmp_path: Path) -> None:
    import socket as socket_module

    stale = tmp_path / "agent.sock"  # a socket left by an agent that died: nobody listens
    listener = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()
    epilog = _slurm_script("epilog", stale, SLURM_JOB_ID="91", SLURM_JOB_UID="0", WATTWISE_EPILOG_GRACE_S="x")
    assert epilog.returncode == 1 and "does not answer" in epilog.stderr
    prolog = _slurm_script("prolog", stale, SLURM_JOB_ID="91", WATTWISE_PROLOG_STRICT="1")
    assert prolog.returncode == 1 and "does not answer" in prolog.stderr
    for proc in (epilog, prolog):
        assert "Traceback" not in proc.stderr and "JSONDecodeError" not in proc.stderr, proc.stderr
