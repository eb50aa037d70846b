"""The agent's lease table, config and lease logic, without HTTP (see test_agent.py for the served agent)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wattwise.agent.agent import Agent, AgentRefusal
from wattwise.agent.config import AgentConfig, ModelBounds, parse_config
from wattwise.agent.http import status_of
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder, LeaseConflict, LeaseTable
from wattwise.agent.processes import holder_alive, process_start_ticks
from wattwise.devices import simulated_gpus
from wattwise.devices.agent import gpu_uuid
from wattwise.errors import ConfigError, UsageError

ALICE = Holder(pid=101, uid=1000, job="bert", start_ticks=5)
BOB = Holder(pid=202, uid=1001, job="gpt", start_ticks=7)


def test_the_first_process_holds_a_gpu_and_another_is_refused_with_the_holder_named() -> None:
    table = LeaseTable()
    assert table.check(0, ALICE) is False
    table.take(0, ALICE, {"power_limit_w": 300.0})
    assert table.check(0, ALICE) is True
    with pytest.raises(LeaseConflict, match=r"held by pid 101 \(uid 1000, job 'bert'\)") as err:
        table.take(0, BOB, {})
    assert err.value.holder == ALICE
    assert table.check(1, BOB) is False


def test_a_recycled_pid_is_not_the_holder() -> None:
    table = LeaseTable()
    table.take(0, ALICE, {})
    with pytest.raises(LeaseConflict):
        table.check(0, Holder(pid=101, uid=1000, job="bert", start_ticks=99))


def test_the_table_keeps_the_first_originals_and_lists_what_a_holder_holds() -> None:
    table = LeaseTable()
    table.take(0, ALICE, {"power_limit_w": 300.0})
    table.take(0, ALICE, {"power_limit_w": 200.0})
    table.take(2, ALICE, {"power_limit_w": 250.0})
    lease = table.get(0)
    assert lease is not None and lease.originals == {"power_limit_w": 300.0}
    assert table.held_by(ALICE) == [0, 2]
    assert table.held_by(BOB) == []
    released = table.release(0)
    assert released is not None and table.holder(0) is None
    assert table.release(0) is None


def test_config_bounds_and_allowed_callers() -> None:
    config = parse_config(
        {
            "allowed_users": [1000],
            "allowed_groups": [50],
            "power_limits": [{"model": "a100", "floor_w": 150, "ceiling_w": 250}],
            "sm_clock_mhz": [500, 1500],
        }
    )
    assert config.allows(0, set())
    assert config.allows(1000, {1000})
    assert config.allows(1001, {1001, 50})
    assert not config.allows(1001, {1001})
    assert config.power_bounds("NVIDIA A100-SXM4-40GB") == (150.0, 250.0)
    assert config.power_bounds("H100") == (None, None)
    assert config.sm_clock_mhz == (500, 1500)
    assert AgentConfig().allows(1234, set())


@pytest.mark.parametrize(
    "data, message",
    [
        ({"alowed_users": []}, "unknown key"),
        ({"allowed_users": ["no-such-user-xyz"]}, "no such name"),
        ({"power_limits": [{"model": "x", "floor_w": 300, "ceiling_w": 200}]}, "above ceiling_w"),
        ({"power_limits": [{"floor_w": 100}]}, "needs `model`"),
        ({"sm_clock_mhz": [1500, 500]}, "min <= max"),
        ([], "must be a mapping"),
    ],
)
def test_bad_config_is_refused_with_the_key_named(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def _agent(tmp_path: Path, config: AgentConfig | None = None) -> Agent:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    return Agent(list(gpus), "simulated", config or AgentConfig(), journal)


def test_the_originals_are_journalled_before_the_change_and_restored_when_the_holder_ends(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    state = agent.set_power_limit(0, ALICE, {1000}, 200.0)
    assert state["power_limit_w"] == 200.0 and state["holder"] == {
        "pid": 101,
        "uid": 1000,
        "job": "bert",
        "job_id": "",
        "pgid": None,
    }
    journalled = AgentJournal(tmp_path / "state").load()
    recorded = [{k: c[k] for k in ("device", "setting", "original")} for c in journalled]
    assert {"device": agent.devices[0].spec(), "setting": "power_limit_w", "original": 300.0} in recorded
    # With its holder (pid and start time) and the value it set: what an agent restart keeps it by.
    power = next(c for c in journalled if c["setting"] == "power_limit_w")
    assert power["holder"] == {**ALICE.public(), "start_ticks": 5, "pgid": 0, "pgid_ticks": 0}
    assert power["applied"] == 200.0
    assert os.stat(tmp_path / "state" / "journal.json").st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "state").st_mode & 0o777 == 0o700
    agent.lock_sm_clocks(0, ALICE, {1000}, 900, 1200)
    with pytest.raises(AgentRefusal, match="held by pid 101") as err:
        agent.set_power_limit(0, BOB, {1001}, 150.0)
    assert status_of(err.value) == 409
    agent.holder_exited(ALICE)
    assert agent.status()["gpus"][0] == {
        "index": 0,
        "uuid": gpu_uuid(agent.devices[0].spec()),
        "name": agent.devices[0].name,
        "power_limit_w": 300.0,
        "default_power_limit_w": 300.0,
        "allowed_power_limit_w": [100.0, 300.0],
        "locked_sm_clocks_mhz": None,
        "holder": None,
    }
    assert AgentJournal(tmp_path / "state").load() == []


def test_out_of_range_and_outside_the_admin_bounds_are_refused_with_the_range(tmp_path: Path) -> None:
    config = AgentConfig(power_limits=(ModelBounds("simulated", 150.0, 250.0),), sm_clock_mhz=(600, 1500))
    agent = _agent(tmp_path, config)
    cases = [
        (lambda: agent.set_power_limit(0, ALICE, set(), 50.0), 400, r"range \[100, 300\] W"),
        (lambda: agent.set_power_limit(0, ALICE, set(), 280.0), 403, r"admin allows on GPU 0 \[150, 250\] W"),
        (lambda: agent.lock_sm_clocks(0, ALICE, set(), 300, 1700), 403, r"admin allows \[600, 1500\] MHz"),
        (lambda: agent.lock_sm_clocks(0, ALICE, set(), 100, 1700), 400, r"outside GPU 0's \[210, 1740\] MHz"),
        (lambda: agent.set_power_limit(5, ALICE, set(), 200.0), 404, r"no GPU 5"),
    ]
    for call, status, message in cases:
        with pytest.raises(AgentRefusal, match=message) as err:
            call()
        assert status_of(err.value) == status
    assert agent.leases.items() == []
    assert agent.devices[0].power_limit_w() == 300.0
    assert agent.status()["gpus"][0]["allowed_power_limit_w"] == [150.0, 250.0]  # what clients tune within


def test_a_user_outside_the_allowed_ones_is_refused(tmp_path: Path) -> None:
    agent = _agent(tmp_path, AgentConfig(allowed_uids=frozenset({1000})))
    with pytest.raises(AgentRefusal, match="uid 1001 may not change") as err:
        agent.set_power_limit(0, BOB, {1001}, 200.0)
    assert status_of(err.value) == 403
    agent.set_power_limit(0, ALICE, {1000}, 200.0)


def test_only_the_holder_releases_and_release_restores(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.set_power_limit(1, ALICE, set(), 175.0)
    with pytest.raises(AgentRefusal, match="only its holder may release it"):
        agent.release(1, BOB)
    assert agent.release(1, ALICE)["power_limit_w"] == 300.0
    assert agent.leases.holder(1) is None
    assert agent.release(1, BOB)["holder"] is None  # a free GPU: nothing to do


def test_a_crashed_agents_journal_is_applied_at_the_next_start(tmp_path: Path) -> None:
    agent = _agent(tmp_path)
    agent.set_power_limit(0, ALICE, set(), 150.0)
    agent.lock_sm_clocks(1, ALICE, set(), 900, 900)
    # The agent dies here without restoring; a new one starts on the same state dir.
    again = _agent(tmp_path)
    lines = again.recover()
    assert lines == ["GPU 0: power limit 300 W, SM clocks unlocked", "GPU 1: power limit 300 W, SM clocks unlocked"]
    status = again.status()["gpus"]
    assert [(g["power_limit_w"], g["locked_sm_clocks_mhz"], g["holder"]) for g in status] == [
        (300.0, None, None),
        (300.0, None, None),
    ]


def test_a_journal_writable_by_others_is_not_trusted(tmp_path: Path) -> None:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    journal.save([{"device": {"backend": "simulated", "index": 0}, "setting": "power_limit_w", "original": 300.0}])
    os.chmod(journal.path, 0o666)
    with pytest.raises(UsageError, match="writable by group or others"):
        AgentJournal(tmp_path / "state").prepare()


def test_start_ticks_name_a_live_process_only() -> None:
    assert isinstance(process_start_ticks(os.getpid()), int)
    assert process_start_ticks(2**22 + 5) is None


def test_a_change_that_cannot_be_journalled_first_is_not_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = _agent(tmp_path)

    def full_disk(changes: list) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(agent.journal, "save", full_disk)
    with pytest.raises(AgentRefusal, match="cannot write the agent's journal") as err:
        agent.set_power_limit(0, ALICE, set(), 200.0)
    assert status_of(err.value) == 500
    assert agent.leases.holder(0) is None and agent.devices[0].power_limit_w() == 300.0


def test_a_run_names_itself_to_the_agent_by_its_job_else_its_recurring_job_else_its_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from wattwise.config import EnergyConfig
    from wattwise.run import Run

    monkeypatch.setattr(sys, "argv", ["/home/ada/train_bert.py", "--lr", "3e-4"])
    run = Run(EnergyConfig())
    assert run.job_name == "train_bert.py"
    run.steer_recurring("nightly", power_limit_w=None, batch_size=32, eta=0.5)
    assert run.job_name == "nightly"
    run.cfg.job = "bert"
    assert run.job_name == "bert"
    monkeypatch.setattr(sys, "argv", ["-c"])
    assert Run(EnergyConfig()).job_name == "python"


def test_the_job_name_sent_to_the_agent_is_printable_and_short_enough() -> None:
    from wattwise.agent import MAX_JOB_CHARS
    from wattwise.devices import name_job
    from wattwise.devices.agent import AgentClient, AgentGPU

    agent_gpu = AgentGPU(simulated_gpus(1)[0], AgentClient("/nonexistent.sock"))
    local = simulated_gpus(1)[0]
    name_job([agent_gpu, local], "bert\nnightly" * 20)
    assert agent_gpu.job.startswith("bert?nightly") and len(agent_gpu.job) == MAX_JOB_CHARS
    assert agent_gpu.job.isprintable() and not hasattr(local, "job")


def test_an_agent_start_keeps_a_live_holders_lease_and_setting_and_restores_a_gone_holders(tmp_path: Path) -> None:
    first = _agent(tmp_path)
    me = Holder(os.getpid(), os.getuid(), "bert", process_start_ticks(os.getpid()) or 0)
    first.set_power_limit(0, me, set(), 200.0)
    first.set_power_limit(1, ALICE, set(), 150.0)  # ALICE's pid 101 started at tick 5: long gone
    first.journal.close()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    gpus[0].set_power_limit_w(300.0)  # whatever happened while no agent ran: the holder's limit comes back
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    second = Agent(list(gpus), "simulated", AgentConfig(), journal)
    assert second.recover() == ["GPU 1: power limit 300 W, SM clocks unlocked"]
    status = second.status()["gpus"]
    assert (status[0]["power_limit_w"], status[0]["holder"]) == (200.0, me.public())
    assert (status[1]["power_limit_w"], status[1]["holder"]) == (300.0, None)
    assert [(c["device"]["index"], c["holder"]["pid"]) for c in journal.load()] == [(0, me.pid), (0, me.pid)]
    second.holder_exited(me)
    assert second.status()["gpus"][0]["power_limit_w"] == 300.0 and journal.load() == []


def test_a_lease_handed_over_is_the_childs_in_the_journal_and_its_parent_may_still_release_it(tmp_path: Path) -> None:
    # This test's process plays the command, its parent the `wattwise cap` wrapper that hands it the lease.
    wrapper = Holder(os.getppid(), os.getuid(), "cap", process_start_ticks(os.getppid()) or 0)
    agent = _agent(tmp_path)
    agent.set_power_limit(0, wrapper, set(), 200.0)
    state = agent.hand_over(0, wrapper, os.getpid())
    # The lease follows this process's group when the group is the command's own (led by it or the wrapper).
    group = os.getpgrp() if os.getpgrp() in (os.getpid(), os.getppid()) else None
    assert state["holder"] == {"pid": os.getpid(), "uid": os.getuid(), "job": "cap", "job_id": "", "pgid": group}
    assert {c["holder"]["pid"] for c in AgentJournal(tmp_path / "state").load()} == {os.getpid()}
    with pytest.raises(AgentRefusal, match="not a running child") as err:  # BOB is not this process's parent
        agent.set_power_limit(1, BOB, set(), 200.0)
        agent.hand_over(1, BOB, os.getpid())
    assert status_of(err.value) == 403
    agent.release(0, wrapper)
    assert agent.status()["gpus"][0]["holder"] is None and agent.devices[0].power_limit_w() == 300.0


def _gone(pgid: int = 0, pgid_ticks: int = 0) -> Holder:
    """A holder whose process is long gone (pid 101 started at tick 5), following process group `pgid` if given."""
    return Holder(pid=101, uid=1000, job="bert", start_ticks=5, pgid=pgid, pgid_ticks=pgid_ticks)


def _my_group() -> tuple[int, int]:
    """This process's group and its leader's start time (0 when the leader has ended)."""
    return os.getpgrp(), process_start_ticks(os.getpgrp()) or 0


def test_a_holder_that_follows_its_process_group_lives_while_another_process_of_the_group_runs() -> None:
    pgid, leader_ticks = _my_group()
    member = _gone(pgid, leader_ticks)
    if pgid == os.getpid():  # this process leads its group: only another member keeps the group "alive"
        pytest.skip("this test process leads its own process group")
    assert holder_alive(member)  # its pid has ended; this process, of the same group, runs on
    assert not holder_alive(_gone())  # no group followed: its pid alone
    if leader_ticks:  # a leader that runs with another start time: the group's number was reused
        assert not holder_alive(_gone(pgid, leader_ticks + 1))
    back = Holder.from_journal(member.journalled())
    assert back == member and back.public()["pgid"] == pgid
    assert Holder.from_journal({**member.journalled(), "pgid": -3}) == _gone()


def test_the_wrapper_releasing_leaves_the_gpu_held_while_the_commands_group_runs_on(tmp_path: Path) -> None:
    pgid, leader_ticks = _my_group()
    if pgid == os.getpid():
        pytest.skip("this test process leads its own process group")
    agent = _agent(tmp_path)
    agent.set_power_limit(0, ALICE, set(), 200.0)
    # The command ALICE handed the lease to has ended; a process of its group (this one) runs on.
    agent.leases.hand_over(0, _gone(pgid, leader_ticks))
    kept = agent.release(0, ALICE)
    assert kept["released"] == "kept" and kept["holder"]["pgid"] == pgid and kept["power_limit_w"] == 200.0
    # A command whose group has no process left: the wrapper's release restores at once.
    agent.set_power_limit(1, ALICE, set(), 200.0)
    agent.leases.hand_over(1, _gone())
    done = agent.release(1, ALICE)
    assert (done["released"], done["holder"], done["power_limit_w"]) == ("restored", None, 300.0)
    assert agent.release(1, ALICE)["released"] == "not held"


def test_a_jobs_gpus_are_released_by_root_or_its_user_whatever_process_holds_them(tmp_path: Path) -> None:
    from wattwise.agent.audit import AuditLog

    agent = _agent(tmp_path)
    agent.audit = AuditLog(tmp_path / "state")
    in_job = Holder(pid=101, uid=1000, job="bert", start_ticks=5, job_id="77")
    agent.set_power_limit(0, in_job, set(), 200.0)
    agent.set_power_limit(1, Holder(pid=202, uid=1000, job="gpt", start_ticks=7, job_id="78"), set(), 150.0)
    answer = agent.release_job("77", BOB)  # not BOB's to release: named, and kept
    assert (answer["released"], answer["held_by_others"]) == ([], [0])
    assert agent.leases.holder(0) == in_job
    answer = agent.release_job("77", Holder(pid=1, uid=0))
    assert answer["released"] == [0] and [g["holder"] for g in answer["gpus"]] == [None]
    status = agent.status()["gpus"]
    assert [(g["power_limit_w"], g["holder"] and g["holder"]["job_id"]) for g in status] == [
        (300.0, None),
        (150.0, "78"),
    ]
    assert agent.release_job("77", Holder(pid=1, uid=0))["released"] == []  # nothing left: nothing to do
    assert agent.release_job("78", Holder(pid=202, uid=1000, start_ticks=99))["released"] == [1]  # its own user
    agent.audit.close()
    lines = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert [(a["gpu_index"], a["new"], a["why"]) for a in lines if a["why"].startswith("job")] == [
        (0, 300.0, "job released by uid 0"),
        (1, 300.0, "job released by uid 1000"),
    ]
    assert {a["gpu_uuid"] for a in lines if a["gpu_index"] == 1} == {gpu_uuid(agent.devices[1].spec())}


def test_a_url_names_a_gpu_by_its_ascii_index_or_its_exact_uuid(tmp_path: Path) -> None:
    from aiohttp.test_utils import make_mocked_request

    from wattwise.agent.http import _index

    agent = _agent(tmp_path)
    uuid = gpu_uuid(agent.devices[1].spec())

    def named(text: str) -> int:
        return _index(make_mocked_request("POST", f"/v1/gpus/{text}/power_limit", match_info={"index": text}), agent)

    assert (named("0"), named("1"), named(uuid)) == (0, 1, 1)
    for wrong in (
        "GPU-00000000-0000-0000-0000-000000000000",
        uuid[:12],
        uuid.lower().replace("gpu-", ""),
        "\u00b2",
        "\u0661",
    ):
        with pytest.raises(AgentRefusal, match="no GPU") as err:
            named(wrong)
        assert status_of(err.value) == 404


def test_each_kind_of_refusal_is_answered_with_its_own_status() -> None:
    statuses = {kind.__name__: status_of(kind("refused")) for kind in AgentRefusal.__subclasses__()}
    assert statuses == {
        "InvalidRequest": 400,
        "NotAllowed": 403,
        "NoSuchGPU": 404,
        "Conflict": 409,
        "Busy": 429,
        "AgentFault": 500,
    }


def test_a_release_the_gpu_refuses_says_failed_and_keeps_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wattwise.devices import DeviceError

    agent = _agent(tmp_path)
    agent.set_power_limit(0, ALICE, set(), 200.0)

    def refuse(watts: float) -> None:
        raise DeviceError("the GPU fell off the bus")

    monkeypatch.setattr(agent.devices[0], "set_power_limit_w", refuse)
    answer = agent.release(0, ALICE)
    assert (answer["released"], answer["holder"]["pid"], answer["power_limit_w"]) == ("failed", 101, 200.0)
    journalled = AgentJournal(tmp_path / "state").load()
    assert [c["original"] for c in journalled if c["setting"] == "power_limit_w"] == [300.0]  # kept to restore


def test_a_restart_on_renumbered_gpus_restores_each_journalled_gpu_by_uuid_and_keeps_an_unseen_one(
    tmp_path: Path,
) -> None:
    from wattwise.devices.simulated import PowerModel, SimulatedGPU

    first = _agent(tmp_path)
    first.set_power_limit(0, ALICE, set(), 150.0)  # ALICE's pid is long gone: the next start restores
    first.set_power_limit(1, ALICE, set(), 200.0)
    first.journal.close()
    # GPU 0 left the bus: the GPU that was 1 is now 0, and another GPU (another state file) is now 1.
    moved = SimulatedGPU(0, PowerModel.default(), state_file=tmp_path / "sim" / "gpu1.json")
    newcomer = SimulatedGPU(1, PowerModel.default(), state_file=tmp_path / "other" / "gpu1.json")
    newcomer.set_power_limit_w(250.0)  # someone else's setting: not the journal's to undo
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    second = Agent([moved, newcomer], "simulated", AgentConfig(), journal)
    assert second.recover() == ["GPU 0: power limit 300 W, SM clocks unlocked"]
    assert (moved.power_limit_w(), newcomer.power_limit_w()) == (300.0, 250.0)
    kept = journal.load()  # the GPU that left: kept for the agent that sees it again
    assert {c["device"]["state_file"] for c in kept} == {str(tmp_path / "sim" / "gpu0.json")}
    assert {c["setting"]: c["original"] for c in kept} == {"power_limit_w": 300.0, "locked_sm_clocks_mhz": None}


def test_a_live_holders_journalled_limit_is_applied_again_only_within_the_admins_bounds_now(tmp_path: Path) -> None:
    first = _agent(tmp_path)
    me = Holder(os.getpid(), os.getuid(), "bert", process_start_ticks(os.getpid()) or 0)
    first.set_power_limit(0, me, set(), 120.0)
    first.journal.close()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    gpus[0].set_power_limit_w(300.0)
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    floor = AgentConfig(power_limits=(ModelBounds("simulated", floor_w=200.0),))  # raised while no agent ran
    second = Agent(list(gpus), "simulated", floor, journal)
    assert second.recover() == []
    status = second.status()["gpus"][0]
    assert (status["power_limit_w"], status["holder"]) == (200.0, me.public())  # the floor, not 120 W
    second.holder_exited(me)
    assert second.status()["gpus"][0]["power_limit_w"] == 300.0


def test_a_users_release_of_their_job_releases_their_own_leases_and_names_another_users_under_that_id(
    tmp_path: Path,
) -> None:
    agent = _agent(tmp_path)
    alices = Holder(pid=101, uid=1000, job="bert", start_ticks=5, job_id="77")
    bobs = Holder(pid=303, uid=1001, job="squat", start_ticks=9, job_id="77")  # BOB's client names ALICE's job id
    agent.set_power_limit(0, alices, set(), 200.0)
    agent.set_power_limit(1, bobs, set(), 150.0)
    answer = agent.release_job("77", Holder(pid=404, uid=1000, start_ticks=11))  # ALICE's epilog-like release
    assert (answer["released"], answer["held_by_others"]) == ([0], [1])
    assert [g["index"] for g in answer["gpus"]] == [0]
    assert agent.leases.holder(0) is None and agent.leases.holder(1) == bobs
