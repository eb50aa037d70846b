"""The agent's defences in-process: connection limits per uid, the bounded log, the socket's folder and mode."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import socket
import stat
from pathlib import Path

import pytest

from wattwise.agent.connections import ConnectionLimits, QuietLog
from wattwise.agent.leases import Holder
from wattwise.agent.serve import share_socket, socket_folder_problem
from wattwise.errors import UsageError


def test_one_uid_gets_its_limit_others_and_root_still_get_theirs() -> None:
    limits = ConnectionLimits(asyncio.new_event_loop(), per_uid=3, total=5)
    assert [limits.admit(1001) for _ in range(4)] == [True, True, True, False]
    assert [limits.admit(1002) for _ in range(3)] == [True, True, False]  # all users together: 5
    assert limits.admit(0) and limits.admit(0)  # root is counted apart
    limits.leave(1001)
    assert limits.admit(1002) and not limits.admit(1002)
    assert limits.refused == 3 and limits.open == {1001: 2, 1002: 3, 0: 2}


def test_the_quiet_log_passes_a_few_lines_per_message_without_tracebacks_and_counts_the_rest() -> None:
    now = [0.0]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(QuietLog(burst=3, window_s=60, clock=lambda: now[0]))
    logger = logging.Logger("test-quiet")
    logger.addHandler(handler)
    for i in range(1000):
        try:
            raise ConnectionResetError(f"peer {i}")
        except ConnectionResetError:
            logger.exception("Error handling request from %s", "client")
    logger.error("another message")
    now[0] = 61.0
    logger.exception("Error handling request from %s", "client")
    lines = out.getvalue().splitlines()
    assert lines == [
        "Error handling request from client (ConnectionResetError: peer 0)",
        "Error handling request from client (ConnectionResetError: peer 1)",
        "Error handling request from client (ConnectionResetError: peer 2)",
        "another message",
        "Error handling request from client [997 more like it in the last 60 s not logged]",
    ]


def test_a_socket_folder_others_may_write_or_a_link_is_not_trusted(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    assert socket_folder_problem(mine) is None
    mine.chmod(0o775)
    assert socket_folder_problem(mine) == "the folder is writable by group or others (mode 0o775)"
    (tmp_path / "link").symlink_to(mine)
    assert socket_folder_problem(tmp_path / "link") == "is not a folder (a symbolic link or a file)"


def test_the_sockets_mode_is_set_on_the_socket_never_through_a_link_put_in_its_place(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        share_socket(path, -1)
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o660
        victim = tmp_path / "secret"
        victim.write_text("root only")
        victim.chmod(0o600)
        path.unlink()
        path.symlink_to(victim)  # what an attacker who could write the folder would plant after bind
        with pytest.raises(UsageError, match="replaced by something that is not the agent's socket"):
            share_socket(path, -1)
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600


def test_a_journalled_holder_is_read_back_only_when_well_formed() -> None:
    holder = Holder(4242, 1001, "bert", 987654)
    assert Holder.from_journal(holder.journalled()) == holder
    assert Holder.from_journal({"pid": "4242", "uid": 1001, "job": "bert", "start_ticks": 1}) is None
    assert Holder.from_journal({"pid": 4242, "uid": 1001, "job": "x\n", "start_ticks": 1}) == Holder(4242, 1001, "", 1)
    assert Holder.from_journal(None) is None
