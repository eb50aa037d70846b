"""Job registrations end with their job: kept by GPU UUID, ended by the epilog's record, lapsed after a TTL."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from wattwise.agent.agent import Agent, AgentRefusal
from wattwise.agent.config import AgentConfig, parse_config
from wattwise.agent.jobs import JobAllocation, JobRegistry, ended_record, record_ended
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.agent.processes import process_start_ticks
from wattwise.codec import to_json_dict
from wattwise.devices import simulated_gpus
from wattwise.errors import ConfigError
from wattwise.vocabulary import AllocationPolicy

ROOT = Holder(1, 0)
REGISTERED = AgentConfig(allocation=AllocationPolicy.REGISTERED)


def user(uid: int) -> Holder:
    return Holder(os.getpid(), uid, "train", process_start_ticks(os.getpid()) or 0)


def make_agent(tmp_path: Path, config: AgentConfig = REGISTERED, devices: list | None = None) -> Agent:  # type: ignore[type-arg]
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    gpus = devices if devices is not None else list(simulated_gpus(4, persist_dir=tmp_path / "sim"))
    return Agent(gpus, "simulated", config, journal)


def may_change(agent: Agent, index: int, uid: int) -> bool:
    try:
        agent.set_power_limit(index, user(uid), set(), 150.0)
    except AgentRefusal:
        return False
    agent.release(index, user(uid))
    return True


def test_a_registration_follows_its_gpus_uuid_over_a_renumbered_restart(tmp_path: Path) -> None:
    from wattwise.devices.simulated import PowerModel, SimulatedGPU

    first = make_agent(tmp_path)
    first.register_job("4711", 1001, [3], ROOT)
    first.register_job("4712", 1002, [1], ROOT)
    first.journal.close()
    # GPUs 0-2 left the bus: the GPU that was 3 is now 0, and another GPU is now 1.
    moved = SimulatedGPU(0, PowerModel.default(), state_file=tmp_path / "sim" / "gpu3.json")
    newcomer = SimulatedGPU(1, PowerModel.default(), state_file=tmp_path / "other" / "gpu9.json")
    second = make_agent(tmp_path, devices=[moved, newcomer])
    assert may_change(second, 0, 1001)  # its GPU, under its new number
    assert not may_change(second, 1, 1001)  # the number its GPU had before is another GPU now
    assert not may_change(second, 1, 1002)  # nor is it 1002's: its GPU is not on the node
    assert [(j["job_id"], j["gpus"]) for j in second.status()["jobs"]] == [("4711", [0]), ("4712", [])]


def test_a_record_that_names_gpus_by_index_only_is_not_recalled(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o700)
    legacy = tmp_path / "state" / "jobs.json"  # where an agent before UUIDs kept them, beside its journal
    legacy.write_text(json.dumps({"jobs": [{"job_id": "9", "uid": 1001, "gpus": [0]}]}))
    agent = make_agent(tmp_path)
    assert agent.status()["jobs"] == []
    assert not may_change(agent, 0, 1001)
    assert not legacy.exists()  # `wattwise restore --journal-dir` no longer reads it as a journal
    (tmp_path / "state" / "jobs").mkdir(mode=0o700)
    (tmp_path / "state" / "jobs" / "registered.json").write_text(
        json.dumps({"jobs": [{"job_id": "9", "uid": 1001, "gpus": [0]}]})
    )
    assert make_agent(tmp_path).status()["jobs"] == []


def test_an_epilog_record_left_while_the_agent_was_stopped_ends_the_registration_at_start(tmp_path: Path) -> None:
    first = make_agent(tmp_path)
    first.register_job("7", 1001, [0], ROOT)
    first.register_job("8", 1002, [1], ROOT)
    first.journal.close()
    record = record_ended(tmp_path / "state", "7")  # the epilog: no agent answered
    second = make_agent(tmp_path)
    assert [j["job_id"] for j in second.status()["jobs"]] == ["8"]
    assert not may_change(second, 0, 1001)  # no job: `registered` refuses it
    assert not record.exists()
    third = make_agent(tmp_path)  # and it stays ended
    assert [j["job_id"] for j in third.status()["jobs"]] == ["8"]


def test_an_epilog_record_left_while_the_agent_did_not_answer_ends_the_registration_before_the_next_change(
    tmp_path: Path,
) -> None:
    agent = make_agent(tmp_path)
    agent.register_job("7", 1001, [0], ROOT)
    assert may_change(agent, 0, 1001)
    record_ended(tmp_path / "state", "7")
    assert not may_change(agent, 0, 1001)
    assert agent.status()["jobs"] == []


def test_registering_a_job_again_clears_an_old_record_of_its_end(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    record_ended(tmp_path / "state", "7")
    agent.register_job("7", 1001, [0], ROOT)
    assert not ended_record(tmp_path / "state", "7").exists()
    assert may_change(agent, 0, 1001)


def test_a_registration_lapses_after_its_ttl(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    now = [1_000_000.0]
    agent.jobs = JobRegistry(tmp_path / "state", agent.uuids, ttl_s=3600.0, clock=lambda: now[0])
    info = agent.register_job("7", 1001, [0], ROOT)
    assert (info["registered_at_s"], info["expires_at_s"]) == (1_000_000.0, 1_003_600.0)
    now[0] += 3599.0
    assert may_change(agent, 0, 1001)
    now[0] += 1.0
    assert not may_change(agent, 0, 1001)
    assert agent.status()["jobs"] == []
    assert json.loads((tmp_path / "state" / "jobs" / "registered.json").read_text()) == {"jobs": []}


@pytest.mark.parametrize("ttl", [0, -5, "a week", True, float("inf")])
def test_a_registration_ttl_that_is_not_a_positive_number_of_seconds_is_refused(ttl: object) -> None:
    with pytest.raises(ConfigError, match="registration_ttl_s must be a positive number of seconds"):
        parse_config({"registration_ttl_s": ttl})
    assert parse_config({"registration_ttl_s": 86400}).registration_ttl_s == 86400.0


def test_end_job_with_no_agent_answering_leaves_the_record_the_agent_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wattwise.cli.agent import run_end_job

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    args = argparse.Namespace(job="7", socket=str(tmp_path / "nobody.sock"), state_dir=str(state))
    assert run_end_job(args) == 0
    assert "the agent does not answer" in capsys.readouterr().err
    assert json.loads(ended_record(state, "7").read_text())["job_id"] == "7"


GOOD = {"job_id": "70", "uid": 4321, "gpu_uuids": ["GPU-b", "GPU-a"], "registered_at_s": 10, "expires_at_s": 20.5}


@pytest.mark.parametrize(
    "change",
    [
        {"uid": True},
        {"uid": -1},
        {"job_id": None},
        {"job_id": "7\n"},
        {"gpu_uuids": ["GPU-a", ""]},
        {"gpu_uuids": [0]},
        {"gpu_uuids": "GPU-a"},
        {"registered_at_s": "10"},
        {"expires_at_s": float("inf")},
        {"expires_at_s": False},
    ],
)
def test_a_malformed_entry_of_the_record_is_not_recalled(change: dict[str, object]) -> None:
    assert JobAllocation.from_json({**GOOD, **change}) is None
    assert JobAllocation.from_json({k: v for k, v in GOOD.items() if k not in change}) is None  # or left out


def test_an_entry_is_read_by_the_codec_and_written_back_as_it_was() -> None:
    allocation = JobAllocation.from_json(GOOD)
    assert allocation == JobAllocation("70", 4321, frozenset({"GPU-a", "GPU-b"}), 10.0, 20.5)
    assert to_json_dict(allocation) == {**GOOD, "gpu_uuids": ["GPU-a", "GPU-b"]}
