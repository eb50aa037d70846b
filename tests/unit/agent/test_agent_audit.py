"""The audit log: never through a symbolic link, a full disk is one error line, each user has a share."""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from wattwise.agent.agent import Agent
from wattwise.agent.audit import AUDIT_NAME, AuditLog
from wattwise.agent.config import AgentConfig
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder
from wattwise.devices import simulated_gpus

GPU = {"index": 0, "uuid": "GPU-0"}


def _record(audit: AuditLog, uid: int, new: float = 200.0) -> None:
    audit.record(
        uid=uid, pid=42, job="j", device_spec=GPU, setting="power_limit_w", old=300.0, new=new, why="requested"
    )


def _lines(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / AUDIT_NAME).read_text().splitlines()]


def test_the_audit_log_is_never_written_through_a_symbolic_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / AUDIT_NAME).symlink_to(target)
    with pytest.raises(OSError) as err:
        _record(AuditLog(tmp_path), 1001)
    assert err.value.errno == errno.ELOOP and target.read_text() == ""


def test_one_user_past_its_share_cannot_rotate_the_others_lines_out(tmp_path: Path) -> None:
    clock = VirtualClock()
    audit = AuditLog(tmp_path, max_bytes=4096, backups=1, user_lines=3, window_s=60.0, clock=clock)
    _record(audit, 1002, new=111.0)  # another user's change, before the flood
    for _ in range(1000):
        _record(audit, 1001)
    _record(audit, 0, new=222.0)  # root's lines are never held back
    clock.sleep(60.0)
    _record(audit, 1001, new=150.0)
    lines = _lines(tmp_path)
    assert [(a["uid"], a["new"]) for a in lines][:1] == [(1002, 111.0)]  # still there: never rotated out
    # 3 in the first window, the line saying it passed its share, the count, 1 in the next window
    assert [a["uid"] for a in lines].count(1001) == 6
    note = lines[-2]
    assert (
        note["setting"] is None
        and note["why"] == "not logged: 997 more line(s) of uid 1001 past its share of 3 per 60 s"
    )
    assert lines[-1]["new"] == 150.0 and (0, 222.0) in [(a["uid"], a["new"]) for a in lines]


def test_a_full_disk_lets_changes_through_with_one_error_line_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    agent = Agent(list(simulated_gpus(2, persist_dir=tmp_path / "sim")), "simulated", AgentConfig(), journal)
    agent.audit = AuditLog(tmp_path / "state")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(agent.audit, "_append", full)
    me = Holder(os.getpid(), 1001, "bert", 5)
    with caplog.at_level(logging.WARNING):
        for watts in (200.0, 180.0, 160.0):
            assert agent.set_power_limit(0, me, set(), watts)["power_limit_w"] == watts
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        f"wattwise agent: cannot write the audit log {tmp_path / 'state' / AUDIT_NAME} (No space left on device); "
        "changes go on, not audited, until it can be written again"
    ]
    assert all(r.exc_info is None for r in caplog.records)
    monkeypatch.undo()
    assert agent.set_power_limit(0, me, set(), 150.0)["power_limit_w"] == 150.0
    assert "is written again" in caplog.text and _lines(tmp_path / "state")[-1]["new"] == 150.0


def test_a_user_passing_its_share_is_said_at_once_and_its_count_survives_a_stop(tmp_path: Path) -> None:
    clock = VirtualClock()
    audit = AuditLog(tmp_path, user_lines=3, window_s=60.0, clock=clock)
    for _ in range(4):
        _record(audit, 1001)
    assert [a["why"] for a in _lines(tmp_path)] == ["requested"] * 3 + [
        "not logged: uid 1001 passed its share of 3 line(s) per 60 s; its further lines are counted until the "
        "next window"
    ]
    for _ in range(6):
        _record(audit, 1001)
    audit.close()  # the agent stops before uid 1001 writes again
    assert _lines(tmp_path)[-1]["why"] == "not logged: 7 more line(s) of uid 1001 past its share of 3 per 60 s"
    assert len(_lines(tmp_path)) == 5
    audit.close()  # said once
    assert len(_lines(tmp_path)) == 5


def test_a_restart_that_changes_nothing_writes_no_audit_line(tmp_path: Path) -> None:
    first_journal = AgentJournal(tmp_path / "state")
    first_journal.prepare()
    gpus = simulated_gpus(2, persist_dir=tmp_path / "sim")
    first = Agent(list(gpus), "simulated", AgentConfig(), first_journal, AuditLog(tmp_path / "state"))
    gone = Holder(2**22 + 9, 1001, "bert", 5)  # a holder no process can be: gone by the restart
    first.set_power_limit(0, gone, set(), 150.0)
    first_journal.close()
    journal = AgentJournal(tmp_path / "state")
    journal.prepare()
    second = Agent(list(simulated_gpus(2, persist_dir=tmp_path / "sim")), "simulated", AgentConfig(), journal)
    second.audit = AuditLog(tmp_path / "state")
    second.recover()
    at_start = [
        (a["setting"], a["old"], a["new"]) for a in _lines(tmp_path / "state") if a["why"] == "holder gone at start"
    ]
    assert at_start == [("power_limit_w", 150.0, 300.0)]  # the clocks were never locked: no line for them
