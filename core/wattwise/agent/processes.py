"""The processes the agent serves, as the kernel shows them: peer credentials, /proc, and their watchers.

A caller is who the kernel says it is (SO_PEERCRED on the connection); a holder is a process named by its
pid and start time (a reused pid is another process), whose lease may follow its process group. The
`ProcessWatcher` calls back when a holder has ended: by pidfd on the event loop, else by polling /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from wattwise.agent.leases import Holder

#: How often a holder is checked when pidfd is unavailable (Linux before 5.3).
POLL_S = 0.2
#: Where the kernel shows its processes (a test points it at a folder of its own).
PROC = "/proc"
#: SO_PEERPIDFD (Linux 6.5): a pidfd of the peer as it was at connect, which no recycled pid can fool.
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)


def peer_credentials(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, from the kernel."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a connection, pinned when the agent accepted it.

    Its pid, uid and gid are SO_PEERCRED's, read at accept. The process itself is pinned by a pidfd
    (SO_PEERPIDFD where the kernel offers it, else `os.pidfd_open` at accept) and by its start time read
    at accept: a request acts for this process only while `same_process` holds, so a pid the caller's
    process gave up and another user's process took later is never taken for the caller.
    """

    pid: int
    uid: int
    gid: int
    #: Start time read at accept (clock ticks since boot); None: gone already, or not the peer's process.
    start_ticks: int | None
    #: A pidfd of the process; None where the kernel offers none (then the start time alone pins it).
    pidfd: int | None = None

    def same_process(self) -> bool:
        """Whether the process accepted still runs under its pid.

        True means the reads of /proc made before this call (its groups, its cgroup) were of that process.
        """
        if self.start_ticks is None or self.pid <= 0:
            return False
        if self.pidfd is not None and _pidfd_ended(self.pidfd):
            return False
        return process_start_ticks(self.pid) == self.start_ticks

    def close(self) -> None:
        """Let go of the pidfd (the connection ended)."""
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)


def identify_peer(sock: Any) -> Peer:
    """The peer of an accepted connection, pinned now (see `Peer`).

    The start time is taken only when the process under the pid runs as the uid SO_PEERCRED names (real
    or effective): a pid recycled between the connect and the accept by another user's process pins nothing.
    """
    pid, uid, gid = peer_credentials(sock)
    pidfd = _peer_pidfd(sock)
    if pidfd is None and pid > 0 and hasattr(os, "pidfd_open"):
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    ticks = process_start_ticks(pid) if pid > 0 else None
    found = parent_and_uids(pid) if ticks is not None else None
    if found is None or uid not in found[1]:
        ticks = None
    peer = Peer(pid, uid, gid, ticks, pidfd)
    if ticks is not None and not peer.same_process():  # ended (and perhaps replaced) while it was read
        peer = Peer(pid, uid, gid, None, pidfd)
    return peer


def _peer_pidfd(sock: Any) -> int | None:
    """SO_PEERPIDFD's pidfd of the peer; None where the kernel (before 6.5) or the socket offers none."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, struct.calcsize("i"))
    except (OSError, AttributeError, TypeError):
        return None
    fd = int(struct.unpack("i", raw)[0]) if isinstance(raw, bytes) else int(raw)
    return fd if fd >= 0 else None


def _pidfd_ended(fd: int) -> bool:
    """Whether the process of pidfd `fd` has ended (a pidfd polls readable once it has)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _stat_fields(pid: int | str, *, ended_too: bool = False) -> list[str] | None:
    """`/proc/PID/stat` after the command name (state, ppid, pgrp, ...).

    None when the process is gone, or (unless `ended_too`) a zombie: ended, its parent not told yet.
    """
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20 or (fields[0] in ("Z", "X") and not ended_too):
        return None
    return fields


def process_start_ticks(pid: int, *, ended_too: bool = False) -> int | None:
    """Start time of a live process (clock ticks since boot).

    None when it is gone, or (unless `ended_too`) a zombie.
    """
    fields = _stat_fields(pid, ended_too=ended_too)
    return int(fields[19]) if fields else None


def process_start_and_group(pid: int, *, ended_too: bool = False) -> tuple[int, int] | None:
    """(start time in clock ticks since boot, process group) of a live process, from one read: the same process.

    None when it is gone, or (unless `ended_too`) a zombie.
    """
    fields = _stat_fields(pid, ended_too=ended_too)
    return (int(fields[19]), int(fields[2])) if fields else None


def groups_with_members(pgids: Collection[int]) -> set[int]:
    """Of the process groups `pgids`, those in which a process other than the group's leader runs.

    One pass over /proc, however many groups are asked about.
    """
    wanted = {str(pgid) for pgid in pgids if pgid > 0}
    found: set[int] = set()
    if not wanted:
        return found
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None and fields[2] in wanted and fields[2] != entry.name:
                found.add(int(fields[2]))
    return found


def group_has_members(pgid: int, leader_ticks: int, members: Collection[int] | None = None) -> bool:
    """Whether a process other than its leader still runs in process group `pgid` (led at `leader_ticks`).

    The kernel never gives a new process the number of a group that still has members, so a process
    `pgid` that runs with another start time means the group ended and its number was reused: False. The
    leader itself does not count (it is the holder, checked by its pid, or the `wattwise cap` wrapper).
    `members`: what `groups_with_members` found for several groups at once; None: look now.
    """
    leader = process_start_ticks(pgid)
    if leader is not None and leader != leader_ticks:
        return False
    return pgid in (groups_with_members([pgid]) if members is None else members)


def parent_and_uids(pid: int) -> tuple[int, set[int]] | None:
    """(parent pid, {real and effective uid}) of a live process, from `/proc/PID/status`; None when gone."""
    ppid: int | None = None
    uids: set[int] = set()
    try:
        with open(f"{PROC}/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("PPid:"):
                    ppid = int(line.split()[1])
                elif line.startswith("Uid:"):
                    uids = {int(u) for u in line.split()[1:3]}
    except (OSError, ValueError, IndexError):
        return None
    return (ppid, uids) if ppid is not None and uids else None


def namespace_pids(pid: int) -> list[int] | None:
    """The pids of a live process in each PID namespace, the agent's first (`NSpid` of `/proc/PID/status`).

    One entry for a process of the agent's own namespace; a container's process has one more per nested
    namespace, the last its pid as the container sees it. None when it is gone (or the kernel shows no `NSpid`).
    """
    try:
        with open(f"{PROC}/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("NSpid:"):
                    return [int(n) for n in line.split()[1:]] or None
    except (OSError, ValueError):
        return None
    return None


def child_as_seen_by_agent(parent: int, child: int) -> int | None:
    """The pid, in the agent's PID namespace, of `parent`'s child that `parent` knows as `child`.

    `parent` is the agent's pid of a caller (SO_PEERCRED translates it); `child` is the number the caller
    sent, from its own PID namespace (a container's). In the agent's namespace both are the same number;
    otherwise the caller's children are looked up in /proc and the one whose pid at the caller's namespace
    level is `child` is it. None when `parent` has no such child.
    """
    mine = namespace_pids(parent)
    if mine is None:
        return None
    if len(mine) == 1:
        return child
    level = len(mine) - 1
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        found = parent_and_uids(int(entry.name))
        if found is None or found[0] != parent:
            continue
        pids = namespace_pids(int(entry.name))
        if pids is not None and len(pids) > level and pids[level] == child:
            return int(entry.name)
    return None


def process_groups(pid: int, gid: int) -> set[int]:
    """The primary and supplementary groups of a process."""
    groups = {gid}
    with contextlib.suppress(OSError), open(f"{PROC}/{pid}/status", encoding="ascii", errors="replace") as fh:
        for line in fh:
            if line.startswith("Groups:"):
                groups.update(int(g) for g in line.split()[1:] if g.isdigit())
    return groups


class ProcessWatcher:
    """Calls back once when a watched holder ends: pidfd on the event loop, else polling /proc.

    A holder that follows a process group (`Holder.pgid`) ends when its process has ended and no other
    process of the group runs: after its pid's exit the group is polled until it is empty.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_exit: Callable[[Holder], None]) -> None:
        """Watch on `loop`; `on_exit(holder)` is called once when a watched holder has ended."""
        self._loop = loop
        self._on_exit = on_exit
        self._watched: dict[tuple[int, int], Callable[[], None]] = {}
        #: The holders watched by polling /proc (no pidfd, or a process group that outlives the pid).
        self._polled: dict[tuple[int, int], Holder] = {}
        self._poller: asyncio.Task[None] | None = None

    def watch(self, holder: Holder) -> None:
        """Call back when `holder` ends (at once when it has ended already, via the poll)."""
        key = (holder.pid, holder.start_ticks)
        if key in self._watched:
            return
        fd = self._pidfd(holder)
        if fd is not None:
            self._loop.add_reader(fd, self._ended, holder)

            def stop_fd() -> None:
                self._loop.remove_reader(fd)
                os.close(fd)

            self._watched[key] = stop_fd
        else:
            self._watch_by_polling(holder)

    def unwatch(self, holder: Holder) -> None:
        """Stop watching `holder` (its GPUs were given back)."""
        stop = self._watched.pop((holder.pid, holder.start_ticks), None)
        if stop is not None:
            stop()

    def close(self) -> None:
        """Stop watching every holder (the agent stops)."""
        for stop in list(self._watched.values()):
            stop()
        self._watched.clear()
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None

    @staticmethod
    def _pidfd(holder: Holder) -> int | None:
        if not hasattr(os, "pidfd_open"):
            return None
        try:
            fd = os.pidfd_open(holder.pid)
        except OSError:
            return None
        if process_start_ticks(holder.pid) != holder.start_ticks:
            # The pid was recycled between the request and pidfd_open: this fd names another process.
            os.close(fd)
            return None
        return fd

    def _ended(self, holder: Holder) -> None:
        self.unwatch(holder)
        if holder_alive(holder):  # its process group lives on: poll that
            self._watch_by_polling(holder)
            return
        self._on_exit(holder)

    def _watch_by_polling(self, holder: Holder) -> None:
        key = (holder.pid, holder.start_ticks)
        self._polled[key] = holder

        def stop_polling() -> None:
            self._polled.pop(key, None)

        self._watched[key] = stop_polling
        if self._poller is None or self._poller.done():
            self._poller = self._loop.create_task(self._poll())

    async def _poll(self) -> None:
        """Every `POLL_S` while any holder is polled: one pass over /proc answers for all their groups."""
        while self._polled:
            members = groups_with_members({h.pgid for h in self._polled.values()})
            for key, holder in list(self._polled.items()):
                if key in self._polled and not holder_alive(holder, members):
                    del self._polled[key]
                    self._watched.pop(key, None)
                    self._on_exit(holder)
            if self._polled:
                await asyncio.sleep(POLL_S)


def process_alive(holder: Holder) -> bool:
    """Whether the holder's process runs: its pid names a live process that started when the holder did."""
    return holder.start_ticks > 0 and process_start_ticks(holder.pid) == holder.start_ticks


def holder_alive(holder: Holder, members: Collection[int] | None = None) -> bool:
    """Whether `holder` still runs: its process, or another process of the group its lease follows.

    `members`: the groups `groups_with_members` found with members (several holders checked in one pass).
    """
    return process_alive(holder) or (holder.pgid > 0 and group_has_members(holder.pgid, holder.pgid_ticks, members))
