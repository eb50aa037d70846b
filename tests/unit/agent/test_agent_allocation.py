"""The agent decides which GPUs a caller may change from the node's own record of allocations.

A user whose job SLURM gave GPU 3 held GPU 0 at the admin's floor (`hold 0 150`, HTTP 200), and the job
that SLURM had given GPU 0 then could not cap it. Now the prolog registers each job's GPUs (UUIDs or
indices), uid and job id; a user with a job registered may change only the GPUs of their jobs, whatever the
policy; the policy (`allocation: none | registered | cgroup`) decides for a user with nothing registered.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wattwise.agent.agent import Agent, AgentRefusal
from wattwise.agent.audit import AuditLog
from wattwise.agent.config import AgentConfig, parse_config
from wattwise.agent.http import status_of
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.agent.processes import process_start_ticks
from wattwise.devices import simulated_gpus
from wattwise.devices.agent import JobAllocationInfo
from wattwise.errors import ConfigError
from wattwise.vocabulary import AllocationPolicy

ROOT = Holder(os.getpid(), 0, "prolog", process_start_ticks(os.getpid()) or 0)


def user(uid: int, job: str = "train") -> Holder:
    """A live process of user `uid` (this test's own process, under another uid as the kernel would name it)."""
    return Holder(os.getpid(), uid, job, process_start_ticks(os.getpid()) or 0)


def make_agent(tmp_path: Path, allocation: str = AllocationPolicy.NONE) -> Agent:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    gpus = simulated_gpus(4, persist_dir=tmp_path / "sim")
    return Agent(
        list(gpus),
        "simulated",
        AgentConfig(allocation=AllocationPolicy(allocation)),
        journal,
        audit=AuditLog(tmp_path / "state"),
    )


def shown(info: JobAllocationInfo | None) -> dict[str, object]:
    """A registration's job, user and GPU indices (what these tests compare)."""
    assert info is not None
    return {"job_id": info["job_id"], "uid": info["uid"], "gpus": info["gpus"]}


def refused(call) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(AgentRefusal) as err:
        call()
    return status_of(err.value), str(err.value)


def test_a_user_with_a_registered_job_may_change_only_its_gpus(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    uuid3 = agent.gpu_status(3)["uuid"]
    assert shown(agent.register_job("4711", 1001, [agent.uuids[uuid3]], ROOT)) == {
        "job_id": "4711",
        "uid": 1001,
        "gpus": [3],
    }
    squatter = user(1001)
    status, why = refused(lambda: agent.set_power_limit(0, squatter, set(), 150.0))
    assert status == 403
    assert why == (
        "GPU 0 is outside the allocation of uid 1001 (job 4711: GPU(s) 3); a job may change only the "
        "GPUs its scheduler gave it"
    )
    assert agent.gpu_status(0)["holder"] is None and agent.gpu_status(0)["power_limit_w"] == 300.0
    assert agent.set_power_limit(3, squatter, set(), 150.0)["power_limit_w"] == 150.0  # its own GPU
    [line] = [json.loads(x) for x in (tmp_path / "state" / "audit.jsonl").read_text().splitlines() if "refused" in x]
    assert line["uid"] == 1001 and line["why"].startswith("refused: GPU 0 is outside the allocation")
    assert agent.set_power_limit(1, user(1002), set(), 200.0)["power_limit_w"] == 200.0  # nothing registered: none
    assert agent.set_power_limit(2, ROOT, set(), 250.0)["power_limit_w"] == 250.0  # root: any GPU


def test_the_registered_policy_refuses_a_user_with_no_job_and_ending_the_job_ends_its_rights(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, allocation="registered")
    status, why = refused(lambda: agent.set_power_limit(0, user(1001), set(), 150.0))
    assert status == 403 and why.startswith("uid 1001 has no job registered on this node")
    agent.register_job("7", 1001, [0, 1], ROOT)
    assert agent.set_power_limit(1, user(1001), set(), 150.0)["power_limit_w"] == 150.0
    assert [shown(j) for j in agent.status()["jobs"]] == [{"job_id": "7", "uid": 1001, "gpus": [0, 1]}]
    assert shown(agent.end_job("7", ROOT)) == {"job_id": "7", "uid": 1001, "gpus": [0, 1]}
    assert refused(lambda: agent.set_power_limit(0, user(1001), set(), 150.0))[0] == 403


def test_only_root_registers_or_ends_a_job_and_unknown_gpus_are_refused(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    assert refused(lambda: agent.register_job("1", 1001, [0, 1, 2, 3], user(1001))) == (
        403,
        "only root registers a job's GPUs (the SLURM prolog runs as root)",
    )
    assert refused(lambda: agent.end_job("1", user(1001)))[0] == 403
    assert refused(lambda: agent.register_job("1", 1001, [9], ROOT))[0] == 404
    assert list(agent.jobs) == []


def test_registrations_outlive_an_agent_restart(tmp_path: Path) -> None:
    first = make_agent(tmp_path)
    first.register_job("4711", 1001, [3], ROOT)
    first.journal.close()
    second = make_agent(tmp_path)
    assert refused(lambda: second.set_power_limit(0, user(1001), set(), 150.0))[0] == 403
    assert [shown(j) for j in second.status()["jobs"]] == [{"job_id": "4711", "uid": 1001, "gpus": [3]}]


def test_an_allocation_policy_the_agent_cannot_enforce_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"allocation must be one of none, registered, cgroup \(got 'slurm'\)"):
        parse_config({"allocation": "slurm"})
    assert parse_config({"allocation": "registered"}).allocation == "registered"
    assert parse_config({"allocation": "cgroup"}).allocation == "cgroup"


@pytest.mark.parametrize(
    ("proc_cgroup", "folder"),
    [
        ("12:devices:/slurm/uid_1001/job_4711\n0::/\n", "devices/slurm/uid_1001/job_4711"),  # v1 devices
        (
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n",
            "kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope",
        ),
    ],
)
def test_the_device_cgroup_of_a_caller_is_the_v1_devices_one_else_the_unified_one(
    tmp_path: Path, proc_cgroup: str, folder: str
) -> None:
    from wattwise.agent.cgroups import cgroup_folder

    if folder.startswith("devices/"):
        (tmp_path / "devices").mkdir()
    assert cgroup_folder(proc_cgroup, tmp_path) == tmp_path / folder


@pytest.mark.parametrize("proc_cgroup", ["0::/../../kubepods.slice/pod\n", "1:name=systemd:/\n", ""])
def test_a_cgroup_outside_the_agents_namespace_is_not_guessed(proc_cgroup: str) -> None:
    from wattwise.agent.cgroups import CgroupUnknown, cgroup_folder

    with pytest.raises(CgroupUnknown, match="not in the agent's cgroup namespace"):
        cgroup_folder(proc_cgroup, Path("/nonexistent"))


def test_an_nvidia_gpus_device_node_is_found_by_uuid_in_the_drivers_list(tmp_path: Path) -> None:
    from wattwise.agent.cgroups import CgroupUnknown, device_node

    for minor, uuid in ((0, "GPU-aaaa"), (3, "GPU-bbbb")):
        folder = tmp_path / f"0000:0{minor}:00.0"
        folder.mkdir()
        (folder / "information").write_text(f"Model: \t NVIDIA H100\nGPU UUID: \t {uuid}\nDevice Minor: \t {minor}\n")
    assert device_node({"backend": "nvml", "uuid": "GPU-bbbb", "index": 1}, str(tmp_path)) == "/dev/nvidia3"
    with pytest.raises(CgroupUnknown, match="no device node"):
        device_node({"backend": "nvml", "uuid": "GPU-cccc", "index": 2}, str(tmp_path))


def test_the_cgroup_policy_refuses_a_gpu_it_cannot_check_in_one_line(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, allocation="cgroup")
    status, why = refused(lambda: agent.set_power_limit(0, user(1001), set(), 150.0))
    assert status == 403 and why.startswith("GPU 0: the agent cannot tell whether pid")
    assert "its simulated device node" in why and why.endswith("its allocation policy is `cgroup`")
    assert agent.gpu_status(0)["holder"] is None


@pytest.mark.parametrize("group", ["99999999999", "4294967295", "no-such-group-here"])
def test_a_group_that_cannot_be_one_is_refused_in_one_line(group: str) -> None:
    from wattwise.agent.serve import group_id
    from wattwise.errors import UsageError

    with pytest.raises(UsageError, match=f"^--group {group}: "):
        group_id(group)
    assert group_id("2000") == 2000  # a number need not be named in the container's /etc/group


def test_a_config_file_that_is_not_text_is_refused_in_one_line(tmp_path: Path) -> None:
    from wattwise.agent.config import load_config

    binary = tmp_path / "agent.yaml"
    binary.write_bytes(b"power_limits: \xd0\x00\xff\n")
    with pytest.raises(ConfigError, match=r"agent config .*agent.yaml: not UTF-8 text \(byte 14\)"):
        load_config(binary)
