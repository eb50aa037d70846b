"""The node agent served on a temp Unix socket with the simulated backend, in a subprocess, as a user sees it."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.agent_server import (
    OTHER_UID,
    OUTSIDE_GID,
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
from tests.support.network import free_port
from tests.support.paths import REPO_ROOT
from wattwise.agent.journal import AgentJournal
from wattwise.devices import DeviceError, NoPermissionError, discover, name_job
from wattwise.devices.agent import AgentGPU
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import journal_dir


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """One agent for the tests that leave every GPU free when they end (those that kill it start their own)."""
    port = free_port()
    running = start_agent(
        tmp_path_factory.mktemp("agent"), "--metrics-port", str(port), "--group", grp.getgrgid(os.getgid()).gr_name
    )
    running.metrics_port = port
    yield running
    stop_agent(running)


def test_status_has_the_documented_shape_and_the_socket_is_0660(agent: RunningAgent) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "wattwise", "agent", "status", "--json"],
        env=agent.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    status = json.loads(out)
    assert list(status) == ["gpus", "jobs", "allocation"] and (status["jobs"], status["allocation"]) == ([], "none")
    uuid = status["gpus"][0]["uuid"]
    assert status["gpus"][0] == {
        "index": 0,
        "uuid": uuid,
        "name": "Simulated GPU (built-in 300 W model)",
        "power_limit_w": 300.0,
        "default_power_limit_w": 300.0,
        "allowed_power_limit_w": [100.0, 300.0],
        "locked_sm_clocks_mhz": None,
        "holder": None,
    }
    assert uuid.startswith("GPU-") and uuid != status["gpus"][1]["uuid"]
    assert [g["index"] for g in status["gpus"]] == [0, 1]
    assert os.stat(agent.socket).st_mode & 0o777 == 0o660
    assert os.stat(agent.socket).st_gid == os.getgid()


def test_a_holder_is_named_to_others_and_its_sigkill_restores_the_gpu_within_2_s(agent: RunningAgent) -> None:
    holder = start_holder(agent, 200, "bert")
    try:
        gpu = agent.gpu(0)
        assert gpu["power_limit_w"] == 200.0
        assert gpu["holder"] == {"pid": holder.pid, "uid": os.getuid(), "job": "bert", "job_id": "", "pgid": None}
        with pytest.raises(NoPermissionError) as err:
            agent.client.set_power_limit(0, 150.0, "gpt")
        message = str(err.value)
        assert "\n" not in message and f"held by pid {holder.pid}" in message and "'bert'" in message
        text = subprocess.run(
            [sys.executable, "-m", "wattwise", "agent", "status"],
            env=agent.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"held by pid {holder.pid}" in text and "power limit 200 W" in text
    finally:
        holder.kill()
        holder.wait()
    assert wait_free(agent) < 2.0
    assert agent.gpu(0)["power_limit_w"] == 300.0


def test_the_holder_releases_and_the_original_limit_is_back(agent: RunningAgent) -> None:
    client = agent.client
    assert client.set_power_limit(1, 175.0, "mine")["holder"]["pid"] == os.getpid()
    assert client.lock_sm_clocks(1, 900, 1200)["locked_sm_clocks_mhz"] == [900, 1200]
    assert client.release(1)["holder"] is None
    assert agent.gpu(1)["power_limit_w"] == 300.0 and agent.gpu(1)["locked_sm_clocks_mhz"] is None


def test_the_agent_backend_reads_locally_and_changes_through_the_agent(
    agent: RunningAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATTWISE_AGENT_SOCKET", str(agent.socket))
    found = discover("agent", gpu_indices=[1])
    gpu = found.gpus[0]
    assert isinstance(gpu, AgentGPU) and gpu.simulated and gpu.index == 1
    gpu.set_power_limit_w(225.0)
    assert gpu.power_limit_w() == 225.0  # read locally, from the state the agent shares
    with pytest.raises(DeviceError, match=r"outside GPU 1's range \[100, 300\] W"):
        gpu.set_power_limit_w(20.0)
    gpu.release()
    assert gpu.power_limit_w() == 300.0


def _scrape(agent: RunningAgent) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` whose labels include `labels`, in a scrape's `text`; None if none."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def test_the_guard_names_the_job_journals_nothing_and_its_restore_releases_the_gpu_at_once(
    agent: RunningAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATTWISE_AGENT_SOCKET", str(agent.socket))
    gpu = discover("agent", gpu_indices=[0]).gpus[0]
    name_job([gpu], "bert")
    limits, clocks = SettingsGuard(), SettingsGuard()  # two guards of one process share its lease
    try:
        limits.set_power_limit(gpu, 200.0)
        clocks.lock_sm_clocks(gpu, 900, 1200)
        assert agent.gpu(0)["holder"] == {
            "pid": os.getpid(),
            "uid": os.getuid(),
            "job": "bert",
            "job_id": "",
            "pgid": None,
        }
        assert _value(_scrape(agent), "wattwise_gpu_power_limit_watts", gpu="0", job_name="bert") == 200.0
        assert not journal_dir().exists() or not list(journal_dir().glob("*.json"))  # the agent journals
        restored = limits.restore_all()
        assert not restored.failed and len(restored.restored) == 1
        gpu_now = agent.gpu(0)  # the other guard still uses the lease: its clocks stay, the limit is back
        assert gpu_now["holder"] is not None and gpu_now["power_limit_w"] == 300.0
        assert gpu_now["locked_sm_clocks_mhz"] == [900, 1200]
        restored = clocks.restore_all()
        assert not restored.failed and "released to the node agent" in restored.restored[0]
        gpu_now = agent.gpu(0)  # the last guard released: free now, while this process lives on
        assert gpu_now["holder"] is None and gpu_now["locked_sm_clocks_mhz"] is None
        assert _value(_scrape(agent), "wattwise_gpu_power_limit_watts", gpu="0", job_name="") == 300.0
    finally:
        limits.close()
        clocks.close()


KILLED = """
import sys, time
from wattwise.devices import discover
from wattwise.settings.guard import SettingsGuard
guard = SettingsGuard()
guard.set_power_limit(discover("agent", gpu_indices=[0]).gpus[0], 175.0)
print("held", flush=True)
time.sleep(120)
"""


def test_a_sigkilled_agent_backed_run_leaves_nothing_for_wattwise_restore(agent: RunningAgent) -> None:
    run = subprocess.Popen([sys.executable, "-c", KILLED], env=agent.env(), stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "held"
        assert agent.gpu(0)["power_limit_w"] == 175.0
    finally:
        run.kill()
        run.wait()
    assert wait_free(agent) < 2.0 and agent.gpu(0)["power_limit_w"] == 300.0
    done = subprocess.run(
        [sys.executable, "-m", "wattwise", "restore"], env=agent.env(), capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "nothing to restore"), done.stdout + done.stderr


def test_bad_requests_are_refused_and_the_agent_keeps_serving_with_nothing_changed(agent: RunningAgent) -> None:
    client = agent.client
    cases = [
        ("POST", "/v1/gpus/0/power_limit", b'{"watts": 2', 400, "not valid JSON"),
        ("POST", "/v1/gpus/0/power_limit", b'{"watts": "200"}', 400, "finite number"),
        ("POST", "/v1/gpus/0/power_limit", b"[200]", 400, "JSON object"),
        ("POST", "/v1/gpus/0/power_limit", b'{"watts": 1e999}', 400, "finite number"),
        ("POST", "/v1/gpus/0/power_limit", b'{"watts": 5000}', 400, "outside GPU 0's range [100, 300] W"),
        ("POST", "/v1/gpus/0/power_limit", b'{"watts": 200, "job": "' + b"x" * 500 + b'"}', 400, "job must be"),
        ("POST", "/v1/gpus/0/sm_clocks", b'{"min_mhz": 100, "max_mhz": 9000}', 400, "outside GPU 0's"),
        ("POST", "/v1/gpus/9/power_limit", b'{"watts": 200}', 404, "no GPU 9"),
        ("POST", "/v1/gpus/-1/power_limit", b'{"watts": 200}', 404, "no GPU"),
        ("POST", "/v1/gpus/0/power_limit", b"x" * 200_000, 413, "too large"),
    ]
    for method, path, body, status, message in cases:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        answer = raw_request(agent, head + body).decode(errors="replace")
        assert answer.startswith(f"HTTP/1.1 {status}"), (path, body[:40], answer[:200])
        assert message in answer, answer
    assert raw_request(agent, b"NOT HTTP AT ALL\r\n\r\n").split(b"\r\n")[0].endswith(b" 400 Bad Request")
    # A client that claims another pid is still named by the kernel.
    head = b"POST /v1/gpus/0/power_limit HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
    body = b'{"watts": 250, "pid": 1, "uid": 0, "job": "liar"}'
    answer = raw_request(agent, head + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert b'"pid": 1,' not in answer and f'"pid": {os.getpid()}'.encode() in answer
    client.release(0)
    assert agent.gpu(0)["power_limit_w"] == 300.0 and agent.gpu(0)["holder"] is None
    assert agent.proc.poll() is None


def test_a_url_names_a_gpu_by_its_uuid_as_by_its_index_and_an_unknown_uuid_is_404(agent: RunningAgent) -> None:
    uuid = agent.gpu(1)["uuid"]
    client = agent.client
    state = client.set_power_limit(uuid, 250.0, "by-uuid")
    assert (state["index"], state["power_limit_w"], state["holder"]["job"]) == (1, 250.0, "by-uuid")
    assert agent.gpu(0)["holder"] is None
    with pytest.raises(DeviceError, match="no GPU 'GPU-00000000-0000-0000-0000-000000000000' on this node"):
        client.set_power_limit("GPU-00000000-0000-0000-0000-000000000000", 250.0)
    assert client.release(uuid)["released"] == "restored"
    assert (agent.gpu(1)["power_limit_w"], agent.gpu(1)["holder"]) == (300.0, None)


def test_prometheus_metrics_show_each_gpus_limit_the_holders_job_and_each_leases_energy(agent: RunningAgent) -> None:
    text = _scrape(agent)
    assert _value(text, "wattwise_gpu_power_limit_watts", gpu="0", job_name="") == 300.0
    assert _value(text, "wattwise_gpu_energy_joules_total", gpu="1") is not None
    assert _value(text, "wattwise_agent_leases") == 0.0  # nobody holds a GPU (ended leases may still show)
    assert _value(text, "wattwise_lease_energy_joules_total", job_name="scraped") is None
    agent.client.set_power_limit(0, 180.0, "scraped")
    try:
        text = _scrape(agent)
        assert _value(text, "wattwise_gpu_power_limit_watts", gpu="0", job_name="scraped") == 180.0
        lease_j = _value(text, "wattwise_lease_energy_joules_total", gpu="0", job_name="scraped", uid=str(os.getuid()))
        assert lease_j is not None and lease_j >= 0.0
        assert _value(text, "wattwise_agent_leases") == 1.0
    finally:
        agent.client.release(0)
    text = _scrape(agent)
    # The ended lease's energy to its end is still shown (for a while), so the last joules are counted.
    final_j = _value(text, "wattwise_lease_energy_joules_total", gpu="0", job_name="scraped", uid=str(os.getuid()))
    assert final_j is not None and final_j >= lease_j
    assert _value(text, "wattwise_agent_leases") == 0.0
    assert (_value(text, "wattwise_agent_requests_total") or 0.0) >= 2
    assert (_value(text, "wattwise_agent_restores_total") or 0.0) >= 1


def _energy_rate_w(agent: RunningAgent, seconds: float, load: Callable[[], object] | None = None) -> float:
    """How fast GPU 0's Prometheus energy counter rises (J/s) over `seconds`, `load` run meanwhile."""

    def energy() -> float:
        found = _value(_scrape(agent), "wattwise_gpu_energy_joules_total", gpu="0")
        assert found is not None
        return found

    first, start = energy(), time.monotonic()
    while time.monotonic() - start < seconds:
        if load is not None:
            load()
        else:
            time.sleep(0.05)
    time.sleep(0.2)  # past the load's last step: its end is published too (at most every 0.5 s)
    return (energy() - first) / (time.monotonic() - start)


def test_the_agents_energy_counter_rises_with_the_load_clients_drive_on_its_simulated_gpu(
    agent: RunningAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattwise.tools.workload import emulate_step

    monkeypatch.setenv("WATTWISE_AGENT_SOCKET", str(agent.socket))
    gpus = discover("agent", gpu_indices=[0]).gpus
    idle = _energy_rate_w(agent, 1.5)
    loaded = _energy_rate_w(agent, 2.0, lambda: emulate_step(gpus, lambda: None))
    # Idle is 60 W; busy at the 300 W limit 245 W: under load the counter rises about four times faster.
    assert idle == pytest.approx(60.0, rel=0.3)
    assert loaded > 2.5 * idle, (idle, loaded)


def test_a_flood_of_1000_status_requests_is_served(agent: RunningAgent) -> None:
    client = agent.client
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda _: len(client.status()["gpus"]), range(1000)))
    assert results == [2] * 1000
    assert agent.proc.poll() is None


def test_a_sigkilled_agents_journal_is_applied_at_its_next_start(tmp_path: Path) -> None:
    first = start_agent(tmp_path)
    holder = start_holder(first, 150, "bert", index=1)
    try:
        first.proc.kill()
        first.proc.wait()
        assert json.loads((first.sim_dir / "gpu1.json").read_text())["power_limit_w"] == 150.0
        originals = {(c["device"]["index"], c["setting"]): c["original"] for c in AgentJournal(first.state_dir).load()}
        assert originals[(1, "power_limit_w")] == 300.0
        holder.kill()  # the holder ends while no agent runs: the next start restores its GPU
        holder.wait()
        second = start_agent(tmp_path)
        try:
            assert second.gpu(1)["power_limit_w"] == 300.0 and second.gpu(1)["holder"] is None
            assert AgentJournal(first.state_dir).load() == []
        finally:
            log = stop_agent(second)
        assert "restored after a crash: GPU 1: power limit 300 W" in log
    finally:
        holder.kill()
        holder.wait()


def test_sigterm_restores_the_gpus_of_ended_holders_and_removes_the_socket(tmp_path: Path) -> None:
    running = start_agent(tmp_path)
    holder = start_holder(running, 200, "bert")
    try:
        running.proc.send_signal(signal.SIGSTOP)  # the holder ends while the agent cannot notice it
        holder.kill()
        holder.wait()
        running.proc.send_signal(signal.SIGCONT)
        stop_agent(running)
        assert json.loads((running.sim_dir / "gpu0.json").read_text())["power_limit_w"] == 300.0
        assert not running.socket.exists()
        assert AgentJournal(running.state_dir).load() == []
    finally:
        holder.kill()
        holder.wait()


def test_cap_through_the_agent_holds_while_the_command_runs_then_restores(agent: RunningAgent) -> None:
    cap = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wattwise",
            "cap",
            "--watts",
            "200",
            "--gpus",
            "0,1",
            "--backend",
            "agent",
            "--job",
            "bert-nightly",
            "--json",
            "--",
            "sleep",
            "1",
        ],
        env=agent.env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    seen = None
    deadline = time.monotonic() + 30
    while cap.poll() is None and time.monotonic() < deadline:
        gpu = agent.gpu(1)
        if gpu["holder"] is not None:
            seen = gpu
        time.sleep(0.05)
    out, _ = cap.communicate(timeout=30)
    assert cap.returncode == 0
    assert seen is not None and seen["power_limit_w"] == 200.0
    # Held by the command (sleep, cap's child) once it runs, not by the wrapper.
    assert seen["holder"]["pid"] != cap.pid and seen["holder"] == {
        **seen["holder"],
        "uid": os.getuid(),
        "job": "bert-nightly",
    }
    result = json.loads(out)
    assert result["exit_code"] == 0 and result["gpus"] == [0, 1] and result["simulated"] is True
    assert set(result["energy_j"]) == {"gpu0", "gpu1"} and result["time_s"] >= 1.0
    assert [(g["power_limit_w"], g["holder"]) for g in agent.client.status()["gpus"]] == [(300.0, None)] * 2


def test_cap_exits_with_the_commands_code_and_does_not_run_it_when_refused(agent: RunningAgent) -> None:
    cap = [sys.executable, "-m", "wattwise", "cap", "--backend", "agent"]
    done = subprocess.run(
        [*cap, "--watts", "250", "--", "sh", "-c", "exit 3"], env=agent.env(), capture_output=True, text=True
    )
    assert done.returncode == 3
    # The command ended: the agent restored the GPU then, or cap's release did; either is said. A command
    # that ends before cap hands it the lease is no reason for a warning.
    said = done.stderr.strip().splitlines()
    assert said[-1].endswith(("restored", "restored by the node agent when the command ended")), said
    assert len(said) == 1, said
    refused = subprocess.run(
        [*cap, "--watts", "20", "--", "sh", "-c", "echo ran"], env=agent.env(), capture_output=True, text=True
    )
    assert refused.returncode == 1 and "ran" not in refused.stdout
    assert "outside GPU 0's range [100, 300] W" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert agent.gpu(0)["power_limit_w"] == 300.0 and agent.gpu(0)["holder"] is None


def test_auto_uses_the_agent_when_this_process_may_not_change_settings(
    agent: RunningAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wattwise.devices.agent as client

    monkeypatch.setenv("WATTWISE_AGENT_SOCKET", str(agent.socket))
    monkeypatch.delenv("WATTWISE_BACKEND", raising=False)
    monkeypatch.setattr(client, "_may_change_settings", lambda: False)
    found = discover("auto")
    assert [type(g) for g in found.gpus] == [AgentGPU, AgentGPU]
    assert any("using the node agent" in note for note in found.notes)
    monkeypatch.setattr(client, "_may_change_settings", lambda: True)
    assert not client.agent_preferred()


# -- as ordinary users ----------------------------------------------------------------------------------
@needs_root
@needs_user_python
def test_as_ordinary_users_cap_holds_sigkill_restores_others_are_refused_outsiders_cannot_connect() -> None:
    with agent_for_users() as (running, _):
        cap = as_user(
            USER_UID,
            SOCKET_GID,
            running,
            ["-m", "wattwise", "cap", "--watts", "200", "--backend", "agent", "--", "sleep", "30"],
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while (holder := running.gpu(0)["holder"]) is None or holder["pid"] == cap.pid:
            assert cap.poll() is None and time.monotonic() < deadline, "the cap never handed GPU 0 to sleep"
            time.sleep(0.05)
        gpu = running.gpu(0)
        assert gpu["power_limit_w"] == 200.0
        command_pid = gpu["holder"]["pid"]  # the lease is the command's (sleep), not the wrapper's
        # ... and follows its process group, which cap made the command's own.
        assert gpu["holder"] == {"pid": command_pid, "uid": USER_UID, "job": "sleep", "job_id": "", "pgid": command_pid}
        assert Path(f"/proc/{command_pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
        second = as_user(
            OTHER_UID,
            SOCKET_GID,
            running,
            ["-c", "from wattwise.devices.agent import AgentClient; AgentClient().set_power_limit(0, 150.0, 'gpt')"],
            stderr=subprocess.PIPE,
        )
        _, err = second.communicate(timeout=60)
        assert second.returncode != 0
        last = err.strip().splitlines()[-1]
        assert f"GPU 0 is held by pid {command_pid} (uid {USER_UID}, job 'sleep')" in last
        outsider = as_user(
            OTHER_UID,
            OUTSIDE_GID,
            running,
            ["-c", "from wattwise.devices.agent import AgentClient; AgentClient().status()"],
            stderr=subprocess.PIPE,
        )
        _, err = outsider.communicate(timeout=60)
        assert outsider.returncode != 0 and "permission denied" in err
        os.killpg(cap.pid, signal.SIGKILL)  # the wrapper, then the command's own group
        cap.wait()
        os.killpg(command_pid, signal.SIGKILL)
        assert wait_free(running) < 2.0
        assert running.gpu(0)["power_limit_w"] == 300.0


#: A plain Accelerate script: the flag (ACCELERATE_ENERGY=1) attaches wattwise, the backend comes from the
#: environment; it prints what the agent showed after each step and once the run ended.
ACCELERATE_RUN = """
import json
import torch
from accelerate import Accelerator
from torch import nn
import accelerate_energy
from wattwise.devices.agent import AgentClient
from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model

accelerator = Accelerator(cpu=True)
model = tiny_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
gpus = accelerate_energy.energy_run(accelerator).gpus
x, y = tiny_dataset(32).tensors
during = []
for _ in range(5):
    emulate_step(gpus, lambda: accelerator.backward(nn.functional.mse_loss(model(x), y)))
    optimizer.step()
    optimizer.zero_grad()
    during.append(AgentClient().status()["gpus"][0])
accelerator.end_training()
print(json.dumps({"backends": [g.backend for g in gpus], "during": during,
                  "after": AgentClient().status()["gpus"][0]}))
"""


@needs_root
@needs_user_python
def test_as_an_ordinary_user_an_accelerate_run_with_the_agent_backend_holds_the_gpu_and_gives_it_back() -> None:
    with agent_for_users() as (running, home):
        env = {
            "ACCELERATE_ENERGY": "1",
            "ACCELERATE_ENERGY_BACKEND": "agent",
            "ACCELERATE_ENERGY_MODE": "cap",
            "ACCELERATE_ENERGY_CAP_W": "200",
            "ACCELERATE_ENERGY_JOB": "bert",
            "ACCELERATE_ENERGY_OUTPUT_DIR": str(home / "run"),
            "WATTWISE_BACKEND": "",
        }
        run = as_user(
            USER_UID,
            SOCKET_GID,
            running,
            ["-c", ACCELERATE_RUN],
            home=home,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["backends"] == ["agent", "agent"]  # the agent's two simulated GPUs
        holder = {"pid": run.pid, "uid": USER_UID, "job": "bert", "job_id": "", "pgid": None}
        assert [(g["power_limit_w"], g["holder"]) for g in result["during"]] == [(200.0, holder)] * 5
        # end_training() restored through the guard: released at once, before the process exits.
        assert result["after"]["holder"] is None and result["after"]["power_limit_w"] == 300.0
        summary = json.loads((home / "run" / "summary.json").read_text())
        assert summary["power_limit"]["chosen_power_limit_w"] == 200.0 and summary["simulated"] is True
        # The user's process added the load it drove to the agent's load counter (0660, the socket's group).
        load = running.sim_dir / "gpu0.load.json"
        assert json.loads(load.read_text())["load_j"] > 0 and os.stat(load).st_gid == SOCKET_GID
        assert [(g["power_limit_w"], g["holder"]) for g in running.client.status()["gpus"]] == [(300.0, None)] * 2


LIGHTNING_TUNE = """
import warnings
warnings.filterwarnings("ignore")
import lightning.pytorch as pl
from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule

callback = EnergyCallback(mode="tune", backend="agent", job="bert", output_dir=OUT,
                          overrides=["monitor.sync_cuda=false", "power_limit.profile_steps=20"])
trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=5000, max_epochs=-1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     limit_val_batches=0, callbacks=[callback])
trainer.fit(EmulatedModule(dataset_size=32 * 5000))
"""


@needs_root
@needs_user_python
def test_as_an_ordinary_user_a_lightning_run_tuning_through_the_agent_sigkilled_mid_tuning_is_restored_at_once() -> (
    None
):
    with agent_for_users() as (running, home):
        code = LIGHTNING_TUNE.replace("OUT", repr(str(home / "run")))
        run = as_user(
            USER_UID,
            SOCKET_GID,
            running,
            ["-c", code],
            home=home,
            env={"WATTWISE_BACKEND": ""},
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            limits = set()
            while len(limits) < 2:  # mid-tuning: the tuner has moved from the maximum to a lower limit
                assert run.poll() is None, run.stderr.read()[-3000:] if run.stderr else ""
                assert time.monotonic() < deadline, f"no tuning seen through the agent: {running.gpu(0)}"
                gpu = running.gpu(0)
                if gpu["holder"] is not None:
                    assert gpu["holder"] == {"pid": run.pid, "uid": USER_UID, "job": "bert", "job_id": "", "pgid": None}
                    limits.add(gpu["power_limit_w"])
                time.sleep(0.02)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
        assert wait_free(running) < 2.0
        assert running.gpu(0)["power_limit_w"] == 300.0
        summary = home / "run" / "summary.json"
        assert not summary.exists()  # killed: it never got to write its summary
        restore = as_user(
            USER_UID, SOCKET_GID, running, ["-m", "wattwise", "restore"], home=home, stdout=subprocess.PIPE
        )
        out, _ = restore.communicate(timeout=60)
        assert (restore.returncode, out.strip()) == (0, "nothing to restore")


def test_cap_without_the_agent_goes_through_the_settings_guard(tmp_path: Path) -> None:
    state = tmp_path / "home" / "simulated" / "gpu0.json"
    env = {**os.environ, "WATTWISE_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "wattwise",
            "cap",
            "--watts",
            "180",
            "--backend",
            "simulated",
            "--",
            "sh",
            "-c",
            f"cat {state}; exit 4",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 4
    assert json.loads(done.stdout)["power_limit_w"] == 180.0
    assert json.loads(state.read_text())["power_limit_w"] == 300.0


TUNE = """
import json, warnings
warnings.filterwarnings("ignore")
import lightning.pytorch as pl
from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices.agent import AgentClient

seen = []

class Spy(pl.Callback):
    def on_train_batch_end(self, *args):
        gpu = AgentClient().status()["gpus"][0]
        seen.append((gpu["power_limit_w"], gpu["holder"]))

trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=300, max_epochs=-1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     limit_val_batches=0, callbacks=[EnergyCallback(mode="tune", backend="agent", output_dir=OUT,
                                                                    overrides=["monitor.sync_cuda=false"]), Spy()])
trainer.fit(EmulatedModule(dataset_size=32 * 300))
after = AgentClient().status()["gpus"][0]
print(json.dumps({"seen": seen, "after": after}))
"""


def test_lightning_tunes_through_the_agent_named_after_its_script_and_releases_the_gpu_when_fit_ends(
    agent: RunningAgent, tmp_path: Path
) -> None:
    env = {**agent.env(), "WATTWISE_BACKEND": ""}
    script = tmp_path / "train_bert.py"
    script.write_text(TUNE.replace("OUT", repr(str(tmp_path / "run"))))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    held = [(limit, holder) for limit, holder in out["seen"] if holder is not None]
    assert len({limit for limit, _ in held}) >= 3, out  # the tuner profiled several limits, each set through the agent
    assert {holder["job"] for _, holder in held} == {"train_bert.py"}  # no job given: the script's name
    # Fit ended and the guard restored: the agent shows no holder while the process still runs.
    assert out["after"]["holder"] is None and out["after"]["power_limit_w"] == 300.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["power_limit"]["chosen_power_limit_w"] is not None


def test_the_demo_runs_through_the_agent_on_its_simulated_gpus_and_says_so(agent: RunningAgent, tmp_path: Path) -> None:
    from wattwise.tools.demo import format_demo

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "wattwise",
            "demo",
            "--backend",
            "agent",
            "--framework",  # the agent's part is the same for both; Accelerate's demo starts in half the CPU
            "accelerate",
            "--json",
            "--base-step-time",
            "0.02",
            "--steps-after-tuning",
            "10",
            "--profile-steps",
            "3",
            "--step-w",
            "100",
            "--output-dir",
            str(tmp_path / "demo"),
        ],
        env=agent.env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["simulated"] is True and result["backend"] == "agent"
    assert [row["power_limit_w"] for row in result["profile"]] == [300, 200, 100], done.stderr[-3000:]
    # The emulated load ran on one of the agent's simulated GPUs (a one-GPU demo, CUDA_VISIBLE_DEVICES
    # unset): busy power, far above its 60 W idle, and below what two GPUs would draw.
    by_limit = {row["power_limit_w"]: row["avg_power_w"] for row in result["profile"]}
    assert 120 < by_limit[300] <= 300 and by_limit[300] > by_limit[100]
    assert format_demo(result).startswith("wattwise demo on the SIMULATED GPU through the node agent")
    assert [(g["power_limit_w"], g["holder"]) for g in agent.client.status()["gpus"]] == [(300.0, None)] * 2


def _dashboard_answers(port: int) -> dict[str, tuple[dict, str]]:
    """Each query of the Grafana dashboard (and its node variable), as Prometheus answers it now."""
    board = json.loads((REPO_ROOT / "deploy" / "grafana-dashboard.json").read_text())
    queries = [(f"{p['title']} #{k}", t["expr"]) for p in board["panels"] for k, t in enumerate(p.get("targets", []))]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":  # label_values(METRIC, LABEL): the metric must carry the label
            metric, label = (part.strip() for part in variable["query"][len("label_values(") : -1].split(","))
            queries.append((f"variable {variable['name']}", f"count by ({label}) ({metric})"))
    answers = {}
    for title, expr in queries:
        promql = expr.replace("$instance", ".*").replace("$__range", "1m")
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as answer:
            answers[title] = (json.loads(answer.read()), expr)
    return answers


@pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="no `prometheus` binary (Debian: apt-get install prometheus)"
)
def test_a_real_prometheus_scrapes_the_agent_and_sees_the_energy_counter_rise(
    agent: RunningAgent, tmp_path: Path
) -> None:
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: wattwise-agent\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{agent.metrics_port}']}}]\n"
    )
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def energy() -> list[float]:
        url = f"http://127.0.0.1:{port}/api/v1/query?query=wattwise_gpu_energy_joules_total%7Bgpu%3D%220%22%7D"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                result = json.loads(answer.read())["data"]["result"]
        except OSError:
            return []
        return [float(r["value"][1]) for r in result]

    try:
        holder = start_holder(agent, 200, "load")
        try:
            values: list[float] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (len(values) < 2 or values[-1] <= values[0]):
                values.extend(energy()[:1])
                time.sleep(1.0)
            dashboard = _dashboard_answers(port)
        finally:
            holder.kill()
            holder.wait()
        assert len(values) >= 2 and values[-1] > values[0], values
        # Every query of deploy/grafana-dashboard.json is valid PromQL and finds the agent's series,
        # the per-job panels the holder's job.
        for title, (answer, labels) in dashboard.items():
            assert answer["status"] == "success", (title, answer)
            assert answer["data"]["result"], f"panel {title!r} finds no series"
            if "job_name" in labels:
                assert {"load"} <= {r["metric"].get("job_name") for r in answer["data"]["result"]}, (title, answer)
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    assert wait_free(agent) < 2.0
