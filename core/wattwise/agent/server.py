"""`wattwise agent serve`: the HTTP API over a Unix socket, and the leases behind it.

Routes (JSON in and out; errors are `{"error": "one line"}`):

- `GET  /v1/gpus`: per GPU, the index, name, current and default power limit, locked clocks, holder;
- `GET  /v1/devices`: the backend and each GPU's `spec` (clients open the same GPU locally for reads);
- `POST /v1/gpus/{index}/power_limit` `{"watts": W, "job": "name"}`;
- `POST /v1/gpus/{index}/sm_clocks` `{"min_mhz": F, "max_mhz": F, "job": "name"}`;
- `DELETE /v1/gpus/{index}/sm_clocks`: unlock the clocks (the original stays recorded);
- `POST /v1/gpus/{index}/release`: the holder gives the GPU back, its original settings restored.
- `POST /v1/gpus/{index}/holder` `{"pid": P}`: the holder makes its child P the holder (`wattwise cap`);
- `POST /v1/release` `{"job_id": "J"}`: every GPU held under batch job J is restored (root or J's user).

`{index}` is a GPU's index (ASCII digits) or its UUID (as the status shows it). The caller is who the
kernel says it is (SO_PEERCRED on the connection), never what the body claims.
Answers: 400 malformed or out of the GPU's range, 403 not allowed (or outside the admin's bounds), 404 no
such GPU, 409 held by another process, 413 body too large.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import socket
import stat
import struct
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from aiohttp import web

from wattwise.agent import MAX_JOB_CHARS, is_job_name
from wattwise.agent.audit import AuditLog
from wattwise.agent.config import AgentConfig
from wattwise.agent.connections import ConnectionLimits, quiet_client_logs, raise_open_file_limit
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder, LeaseConflict, LeaseTable
from wattwise.devices.agent import gpu_uuid
from wattwise.devices.base import Device, DeviceError, NotSupportedError
from wattwise.errors import UsageError
from wattwise.safe_files import folder_problem
from wattwise.settings.apply import (
    POWER_LIMIT,
    SM_CLOCKS,
    apply_setting,
    originals_words,
    read_setting,
    restore_originals,
    setting_words,
)

log = logging.getLogger(__name__)

#: Requests are a few dozen bytes: anything larger is refused before it is read.
MAX_BODY_BYTES = 64 * 1024
#: How often a holder is checked when pidfd is unavailable (Linux before 5.3).
POLL_S = 0.2


class AgentError(Exception):
    """A refused request: an HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str) -> None:
        """Refuse with HTTP `status` and the one-line `message` (the answer's `error`)."""
        super().__init__(message)
        self.status = status


# -- who is calling -------------------------------------------------------------------------------------
def peer_credentials(sock: Any) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix socket, from the kernel."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return pid, uid, gid


def _stat_fields(pid: int | str, *, ended_too: bool = False) -> list[str] | None:
    """`/proc/PID/stat` after the command name (state, ppid, pgrp, ...).

    None when the process is gone, or (unless `ended_too`) a zombie: ended, its parent not told yet.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) < 20 or (fields[0] in ("Z", "X") and not ended_too):
        return None
    return fields


def process_start_ticks(pid: int, *, ended_too: bool = False) -> int | None:
    """Start time of a live process (clock ticks since boot).

    None when it is gone, or (unless `ended_too`) a zombie.
    """
    fields = _stat_fields(pid, ended_too=ended_too)
    return int(fields[19]) if fields else None


def groups_with_members(pgids: Collection[int]) -> set[int]:
    """Of the process groups `pgids`, those in which a process other than the group's leader runs.

    One pass over /proc, however many groups are asked about.
    """
    wanted = {str(pgid) for pgid in pgids if pgid > 0}
    found: set[int] = set()
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
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
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("PPid:"):
                    ppid = int(line.split()[1])
                elif line.startswith("Uid:"):
                    uids = {int(u) for u in line.split()[1:3]}
    except (OSError, ValueError, IndexError):
        return None
    return (ppid, uids) if ppid is not None and uids else None


def process_groups(pid: int, gid: int) -> set[int]:
    """The primary and supplementary groups of a process."""
    groups = {gid}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
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


# -- the agent ------------------------------------------------------------------------------------------
class Agent:
    """The GPUs, their leases and the journal; HTTP-free (see `make_app`)."""

    def __init__(self, devices: list[Device], backend: str, config: AgentConfig, journal: AgentJournal,
                 audit: AuditLog | None = None) -> None:
        """The agent of `devices` (served by `backend`), within `config`'s bounds, journalling to `journal`.

        Args:
            devices: The node's GPUs, opened by the agent itself.
            backend: Their backend's name (`GET /v1/devices` tells the clients).
            config: The admin's bounds.
            journal: The agent's journal, prepared (its lock held).
            audit: Where each change is logged; None: nowhere (tests).
        """
        self.devices = {d.index: d for d in devices}
        #: Each GPU's UUID (`gpu_uuid`), by which a URL may name it as well as by its index.
        self.uuids = {gpu_uuid(d.spec()): d.index for d in devices}
        self.backend = backend
        self.config = config
        self.journal = journal
        #: One JSON line per change (`wattwise.agent.audit`); None in tests that need none.
        self.audit = audit
        self.leases = LeaseTable()
        self.watcher: ProcessWatcher | None = None
        #: Journalled changes of GPUs this agent does not see: kept in the journal, never dropped.
        self.unseen: list[dict[str, Any]] = []

    # -- life cycle -------------------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Take over what the last agent journalled (it stopped, or crashed).

        A GPU whose holder still runs (the same pid and start time: a reused pid is not the holder) keeps
        its lease, and the holder's settings are applied again; every other GPU gets its originals back.

        Returns:
            One line per GPU restored.
        """
        originals: dict[int, dict[str, Any]] = {}
        applied: dict[int, dict[str, Any]] = {}
        holders: dict[int, Holder] = {}
        for change in self.journal.load():
            index = change["device"]["index"]
            if index not in self.devices:
                log.error("wattwise agent: journal names GPU %s, which this agent does not see; kept", index)
                self.unseen.append(change)
                continue
            originals.setdefault(index, {})[change["setting"]] = change["original"]
            holder = Holder.from_journal(change.get("holder"))
            if holder is not None:
                holders[index] = holder
            if "applied" in change:
                applied.setdefault(index, {})[change["setting"]] = change["applied"]
        lines = []
        for index, recorded in originals.items():
            holder = holders.get(index)
            if holder is not None and holder_alive(holder) and self._resume(index, holder, recorded,
                                                                      applied.get(index, {})):
                continue
            before = {setting: _reading(self.devices[index], setting) for setting in recorded}
            restore_originals(self.devices[index], recorded)
            for setting, value in recorded.items():
                self._audit(holder or Holder(0, 0), index, setting, before[setting], value, "holder gone at start")
            lines.append(f"GPU {index}: {originals_words(recorded)}")
        self._save()
        return lines

    def _resume(self, index: int, holder: Holder, originals: dict[str, Any], applied: dict[str, Any]) -> bool:
        """Give GPU `index` back to its live `holder` with the settings it had set; False when they fail."""
        device = self.devices[index]
        lease = self.leases.take(index, holder, originals)
        try:
            for setting, value in applied.items():
                before = _reading(device, setting)
                apply_setting(device, setting, value)
                lease.applied[setting] = value
                self._audit(holder, index, setting, before, value, "restart: holder alive")
        except (DeviceError, UsageError, TypeError, ValueError, IndexError) as err:
            log.error("wattwise agent: GPU %d: cannot apply %s's settings again (%s); restoring it", index,
                      holder.describe(), err)
            self.leases.release(index)
            return False
        log.info("wattwise agent: GPU %d stays held by %s, still running (%s)", index, holder.describe(),
                 ", ".join(setting_words(s, v) for s, v in applied.items()) or "nothing set yet")
        return True

    def start_watching(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch every holder (those kept over a restart too) so that its GPUs are restored when it ends."""
        self.watcher = ProcessWatcher(loop, self.holder_exited)
        for _, lease in self.leases.items():
            self.watcher.watch(lease.holder)

    def restore_all(self) -> None:
        """The agent stops: GPUs whose holder has ended get their originals back; live holders keep theirs.

        A live holder's lease stays in the journal (with its pid and start time), so the next agent start
        keeps it; `systemctl restart` never leaves a running job uncapped.
        """
        for index, lease in self.leases.items():
            if holder_alive(lease.holder):
                log.info("wattwise agent: stopping; GPU %d stays as %s set it (still running); the next agent "
                         "start keeps its lease", index, lease.holder.describe())
            else:
                self._give_back(index, "holder ended")
        if self.watcher is not None:
            self.watcher.close()

    def holder_exited(self, holder: Holder) -> None:
        """`holder` ended (its process, and the process group its lease follows): restore its GPUs."""
        for index in self.leases.held_by(holder):
            log.info("wattwise agent: %s ended: restoring GPU %d", holder.describe(), index)
            self._give_back(index, "holder ended")

    # -- requests ---------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """`GET /v1/gpus`: every GPU's `gpu_status`, in index order."""
        return {"gpus": [self.gpu_status(i) for i in sorted(self.devices)]}

    def gpu_status(self, index: int) -> dict[str, Any]:
        """GPU `index` as the status shows it: index, uuid, name, limits, allowed range, clocks, holder.

        A reading the GPU does not support is null.
        """
        device = self.devices[index]
        holder = self.leases.holder(index)
        return {
            "index": index,
            "uuid": gpu_uuid(device.spec()),
            "name": device.name,
            "power_limit_w": _maybe(device.power_limit_w),
            "default_power_limit_w": _maybe(lambda: device.power_limit_range().default_w),
            "allowed_power_limit_w": _maybe(lambda: list(self.allowed_power_limit_w(device))),
            "locked_sm_clocks_mhz": _maybe(lambda: read_setting(device, SM_CLOCKS)),
            "holder": holder.public() if holder else None,
        }

    def allowed_power_limit_w(self, device: Device) -> tuple[float, float]:
        """The power limits a user may set on `device`: the admin's floor and ceiling within its own range.

        Args:
            device: One of the agent's GPUs.

        Returns:
            (low, high) in W; the GPU's own range where the admin sets no bound for its model.

        Raises:
            DeviceError: The GPU's range cannot be read.
        """
        rng = device.power_limit_range()
        floor, ceiling = self.config.power_bounds(device.name)
        return max(rng.min_w, floor or rng.min_w), min(rng.max_w, ceiling or rng.max_w)

    def set_power_limit(self, index: int, caller: Holder, gids: set[int], watts: float) -> dict[str, Any]:
        """Set GPU `index`'s power limit for `caller` (in groups `gids`), taking or keeping its lease.

        Returns:
            The GPU's status after the change.

        Raises:
            AgentError: 400 outside the GPU's range, 403 outside the admin's bounds or for a caller not
                allowed, 404 no such GPU, 409 held by another process, 500 the journal cannot be written.
        """
        device = self._device(index)
        rng = _call(device.power_limit_range)
        lo, hi = rng.min_w, rng.max_w
        if not lo <= watts <= hi:
            raise AgentError(400, f"power limit {watts:g} W is outside GPU {index}'s range [{lo:g}, {hi:g}] W")
        alo, ahi = _call(lambda: self.allowed_power_limit_w(device))
        if not alo <= watts <= ahi:
            raise AgentError(403, f"power limit {watts:g} W is outside the range the admin allows on GPU {index} "
                                  f"[{alo:g}, {ahi:g}] W")
        return self._change(index, caller, gids, POWER_LIMIT, watts)

    def lock_sm_clocks(self, index: int, caller: Holder, gids: set[int], min_mhz: int, max_mhz: int) -> dict[str, Any]:
        """Lock GPU `index`'s SM clocks to [min_mhz, max_mhz] for `caller`, taking or keeping its lease.

        Returns:
            The GPU's status after the change.

        Raises:
            AgentError: As `set_power_limit`, for a clock range outside the GPU's or the admin's.
        """
        device = self._device(index)
        supported = _call(device.supported_sm_clocks_mhz)
        lo, hi = min(supported), max(supported)
        if not lo <= min_mhz <= max_mhz <= hi:
            raise AgentError(400, f"SM clock range [{min_mhz}, {max_mhz}] MHz is outside GPU {index}'s "
                                  f"[{lo}, {hi}] MHz (min first)")
        if self.config.sm_clock_mhz is not None:
            alo, ahi = max(lo, self.config.sm_clock_mhz[0]), min(hi, self.config.sm_clock_mhz[1])
            if not alo <= min_mhz <= max_mhz <= ahi:
                raise AgentError(403, f"SM clock range [{min_mhz}, {max_mhz}] MHz is outside the range the admin "
                                      f"allows [{alo}, {ahi}] MHz")
        return self._change(index, caller, gids, SM_CLOCKS, [min_mhz, max_mhz])

    def reset_sm_clocks(self, index: int, caller: Holder, gids: set[int]) -> dict[str, Any]:
        """Unlock GPU `index`'s SM clocks for `caller` (the original stays recorded for the restore).

        Raises:
            AgentError: As `set_power_limit`.
        """
        self._device(index)
        return self._change(index, caller, gids, SM_CLOCKS, None)

    def release(self, index: int, caller: Holder) -> dict[str, Any]:
        """The holder gives the GPU back: its original settings are restored now.

        The process that handed its lease over (`wattwise cap`, after its command ended) releases too,
        unless the command has ended while other processes of its process group still run: the lease
        follows them, and stays.

        Returns:
            The GPU's status, with `released`: "restored" (by this request), "not held" (the caller held
            nothing: the agent restored it already, when its holder ended), "kept" (held on by the
            command's process group) or "failed" (the GPU refused its originals; still held, see the log).

        Raises:
            AgentError: 409 when another process holds the GPU, 404 for no such GPU.
        """
        self._device(index)
        try:
            held = self.leases.check(index, caller, or_delegator=True)
        except LeaseConflict as err:
            raise AgentError(409, f"{err}; only its holder may release it") from None
        lease = self.leases.get(index)
        if not held or lease is None:
            return {**self.gpu_status(index), "released": "not held"}
        holder = lease.holder
        if not _process_alive(holder) and holder.pgid and group_has_members(holder.pgid, holder.pgid_ticks):
            log.info("wattwise agent: GPU %d stays held: %s ended, other processes of its group %d run on",
                     index, holder.describe(), holder.pgid)
            return {**self.gpu_status(index), "released": "kept"}
        self._give_back(index, "released")
        restored = self.leases.get(index) is None  # else the device refused (the log says why); still held
        return {**self.gpu_status(index), "released": "restored" if restored else "failed"}

    def release_job(self, job_id: str, caller: Holder) -> dict[str, Any]:
        """Restore every GPU held under batch job `job_id` and drop the leases (a SLURM epilog's call).

        Whatever process holds them, even one the caller cannot see (another PID namespace): the holder's
        client named the job (`SLURM_JOB_ID`) when it leased. Root may release any job, another user only
        their own leases.

        Returns:
            `{"job_id", "released": [indices restored], "gpus": [the status of each]}`.

        Raises:
            AgentError: 403 when a GPU of the job is held by another user than the (non-root) caller.
        """
        of_job = set(self.leases.held_under_job(job_id))
        held = [(i, lease) for i, lease in self.leases.items() if i in of_job]
        others = [i for i, lease in held if caller.uid not in (0, lease.holder.uid)]
        if others:
            raise AgentError(403, f"GPU(s) {others} of job {job_id!r} are held by another user; only root or "
                                  "that user may release them")
        indices = [i for i, _ in held]
        for index, lease in held:
            log.info("wattwise agent: uid %d releases job %r: restoring GPU %d of %s", caller.uid, job_id, index,
                     lease.holder.describe())
            self._give_back(index, f"job released by uid {caller.uid}")
        released = [i for i in indices if self.leases.get(i) is None]
        return {"job_id": job_id, "released": released, "gpus": [self.gpu_status(i) for i in indices]}

    def hand_over(self, index: int, caller: Holder, pid: int) -> dict[str, Any]:
        """The holder makes its child process `pid` the GPU's holder (`wattwise cap` and the command it runs).

        The lease then lasts as long as the child lives, or another process of the child's process group
        when that group is the command's own (the child or the caller leads it): a shell script that starts
        the work in a child and exits leaves it capped. Whatever happens to the caller (killing the
        `wattwise cap` wrapper leaves its command capped); the caller may still release it. The child must
        be the caller's own (its parent) and run as the same user.

        A child that has ended already (the caller has not reaped it yet) is still handed the lease when
        other processes of its group run: a command that starts its work in the background and exits at
        once is no race.

        Raises:
            AgentError: 409 when the caller does not hold the GPU or the child ended leaving nothing of its
                group running, 403 when `pid` is not its child of the same user (or is gone).
        """
        self._device(index)
        try:
            held = self.leases.check(index, caller)
        except LeaseConflict as err:
            raise AgentError(409, f"{err}; only its holder may hand it over") from None
        lease = self.leases.get(index)
        if not held or lease is None:
            raise AgentError(409, f"GPU {index} is not held by pid {caller.pid}; set a limit first")
        found = parent_and_uids(pid)
        fields = _stat_fields(pid, ended_too=True)  # start time and group from one read: the same process
        ticks, pgid = (int(fields[19]), int(fields[2])) if fields else (None, None)
        if found is None or ticks is None or found[0] != caller.pid or found[1] != {caller.uid}:
            raise AgentError(403, f"pid {pid} is not a running child of pid {caller.pid} of the same user; a "
                                  "GPU is handed over only to the caller's own child")
        # The lease follows the child's process group when the group is the command's own: the child leads
        # it, or the caller does (a shell's job). Not a group of others' (a batch script's).
        leader_ticks = {pid: ticks, caller.pid: caller.start_ticks}.get(pgid or 0)
        child = Holder(pid, caller.uid, lease.holder.job, ticks, lease.holder.job_id,
                       pgid if pgid and leader_ticks else 0, leader_ticks or 0)
        if not holder_alive(child):
            raise AgentError(409, f"pid {pid} has ended and no process of its group runs: nothing to hand GPU "
                                  f"{index} over to; it stays held by pid {caller.pid}")
        self.leases.hand_over(index, child)
        with contextlib.suppress(OSError):  # the originals are journalled already; this names the new holder
            self._save()
        if self.watcher is not None:
            self.watcher.watch(child)
            if not self.leases.held_by(caller):
                self.watcher.unwatch(caller)
        log.info("wattwise agent: GPU %d handed over by pid %d to its child %s", index, caller.pid,
                 child.describe())
        return self.gpu_status(index)

    # -- internals --------------------------------------------------------------------------------------
    def _device(self, index: int) -> Device:
        device = self.devices.get(index)
        if device is None:
            raise AgentError(404, f"no GPU {index} on this node (GPUs: {sorted(self.devices)})")
        return device

    def _change(self, index: int, caller: Holder, gids: set[int], setting: str, value: Any) -> dict[str, Any]:
        if not self.config.allows(caller.uid, gids):
            raise AgentError(403, f"uid {caller.uid} may not change GPU settings on this node "
                                  "(the agent's config lists the allowed users and groups)")
        try:
            held = self.leases.check(index, caller)
        except LeaseConflict as err:
            raise AgentError(409, str(err)) from None
        if not held:
            self.leases.take(index, caller, _read_originals(self.devices[index]))
            try:
                self._save()  # the originals are on disk before the first change
            except OSError as err:
                self.leases.release(index)
                raise AgentError(500, f"cannot write the agent's journal ({err.strerror or err}); nothing "
                                      "changed") from None
            if self.watcher is not None:
                self.watcher.watch(caller)
            log.info("wattwise agent: GPU %d now held by %s", index, caller.describe())
        device = self.devices[index]
        before = _reading(device, setting)
        try:
            _call(lambda: apply_setting(device, setting, value))
        except AgentError:
            if not held:
                self._give_back(index, "refused")
            raise
        self._audit(caller, index, setting, before, value, "requested")
        lease = self.leases.get(index)
        if lease is not None:
            lease.applied[setting] = value
            with contextlib.suppress(OSError):  # the originals are journalled already; this adds the re-apply
                self._save()
        return self.gpu_status(index)

    def _give_back(self, index: int, why: str) -> None:
        lease = self.leases.get(index)
        if lease is None:
            return
        device = self.devices[index]
        before = {setting: _reading(device, setting) for setting in lease.originals}
        try:
            restore_originals(device, lease.originals)
        except DeviceError as err:
            log.error("wattwise agent: could not restore GPU %d (%s); kept in the journal", index, err)
            return
        for setting, value in lease.originals.items():
            if before[setting] != value:
                self._audit(lease.holder, index, setting, before[setting], value, why)
        self.leases.release(index)
        self._save()
        if self.watcher is not None and not self.leases.held_by(lease.holder):
            self.watcher.unwatch(lease.holder)

    def _save(self) -> None:
        """Journal the originals of every held GPU (and those of GPUs not seen): the settings journal's format.

        Each change also names its holder (pid, uid, job, start time) and the value the holder set, if any:
        what the next agent start needs to keep a live holder's lease (other readers ignore both).
        """
        changes = []
        for index, lease in self.leases.items():
            for setting, value in lease.originals.items():
                change = {"device": self.devices[index].spec(), "setting": setting, "original": value,
                          "holder": lease.holder.journalled()}
                if setting in lease.applied:
                    change["applied"] = lease.applied[setting]
                changes.append(change)
        self.journal.save(changes + self.unseen)

    def _audit(self, holder: Holder, index: int, setting: str, old: Any, new: Any, why: str) -> None:
        if self.audit is None:
            return
        try:
            spec = self.devices[index].spec()
            self.audit.record(uid=holder.uid, pid=holder.pid, job=holder.job,
                              device_spec={**spec, "uuid": gpu_uuid(spec)},  # the status's, a simulated GPU's too
                              setting=setting, old=old, new=new, why=why)
        except (OSError, ValueError) as err:
            log.error("wattwise agent: cannot write the audit log (%s)", err)


def _process_alive(holder: Holder) -> bool:
    """Whether the holder's process runs: its pid names a live process that started when the holder did."""
    return holder.start_ticks > 0 and process_start_ticks(holder.pid) == holder.start_ticks


def holder_alive(holder: Holder, members: Collection[int] | None = None) -> bool:
    """Whether `holder` still runs: its process, or another process of the group its lease follows.

    `members`: the groups `groups_with_members` found with members (several holders checked in one pass).
    """
    return _process_alive(holder) or (holder.pgid > 0 and group_has_members(holder.pgid, holder.pgid_ticks,
                                                                            members))


def _read_originals(device: Device) -> dict[str, Any]:
    originals: dict[str, Any] = {}
    for setting in (POWER_LIMIT, SM_CLOCKS):
        with contextlib.suppress(NotSupportedError):
            originals[setting] = read_setting(device, setting)
    return originals


def _reading(device: Device, setting: str) -> Any:
    """`setting`'s value on `device` now, for the audit log; None when it cannot be read."""
    try:
        return read_setting(device, setting)
    except DeviceError:
        return None


def _maybe(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except NotSupportedError:
        return None


def _call(fn: Callable[[], Any]) -> Any:
    """A device call; its refusal becomes a one-line 400 (bad value) or 500 (device failure)."""
    try:
        return fn()
    except NotSupportedError as err:
        raise AgentError(400, str(err)) from None
    except UsageError as err:
        raise AgentError(400, str(err)) from None
    except DeviceError as err:
        raise AgentError(500, f"device error: {err}") from None


# -- HTTP -----------------------------------------------------------------------------------------------
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AgentError as err:
        return _error(err.status, str(err))
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"request body too large (at most {MAX_BODY_BYTES} bytes)")
    except web.HTTPException as err:
        if err.status < 400:
            raise
        return _error(err.status, err.reason)
    except Exception:
        log.exception("wattwise agent: request %s %s failed", request.method, request.path)
        return _error(500, "internal error (see the agent's log)")


def _caller(request: web.Request) -> tuple[Holder, set[int]]:
    """The calling process as the kernel names it, and its groups; the job name is the body's."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None:
        raise AgentError(400, "connection closed")
    pid, uid, gid = peer_credentials(sock)
    ticks = process_start_ticks(pid)
    if pid <= 0 or ticks is None:
        raise AgentError(400, "the calling process is gone (or is in another PID namespace)")
    return Holder(pid, uid, "", ticks), process_groups(pid, gid)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise AgentError(400, "the request body is not valid JSON") from None
    except RecursionError:
        raise AgentError(400, "the request body is nested too deeply (a flat JSON object is expected)") from None
    if not isinstance(data, dict):
        raise AgentError(400, "the request body must be a JSON object")
    return data


def _job(data: dict[str, Any], key: str = "job") -> str:
    """A name the body gives (`job`, `job_id`): printable, at most `MAX_JOB_CHARS`; "" when not given."""
    job = data.get(key, "")
    if not is_job_name(job):
        raise AgentError(400, f"{key} must be a printable string of at most {MAX_JOB_CHARS} characters")
    return job


def _number(data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AgentError(400, f"{key} must be a finite number (got {value!r})")
    return float(value)


def _integer(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise AgentError(400, f"{key} must be an integer number of MHz (got {value!r})")
    return value


def _index(request: web.Request, agent: Agent) -> int:
    """The index of the GPU a URL names: by its index (ASCII digits only) or by its UUID.

    A client names the GPU by its UUID, so that a renumbering of the node's GPUs between its lookup and
    its request cannot make it change another GPU.
    """
    text = request.match_info["index"]
    if text.isascii() and text.isdigit() and len(text) <= 6:  # "²" and "١" are digits to str.isdigit
        return int(text)
    if text in agent.uuids:
        return agent.uuids[text]
    raise AgentError(404, f"no GPU {text!r} on this node (a GPU is named by its index or its uuid)")


def make_app(agent: Agent) -> web.Application:
    """The aiohttp application serving `agent`."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response(agent.status())

    async def devices(request: web.Request) -> web.Response:
        specs = [agent.devices[i].spec() for i in sorted(agent.devices)]
        return web.json_response({"backend": agent.backend, "devices": specs})

    async def power_limit(request: web.Request) -> web.Response:
        index = _index(request, agent)
        data = await _body(request)
        caller, gids = _caller(request)
        holder = Holder(caller.pid, caller.uid, _job(data), caller.start_ticks, _job(data, "job_id"))
        return web.json_response(agent.set_power_limit(index, holder, gids, _number(data, "watts")))

    async def lock_clocks(request: web.Request) -> web.Response:
        index = _index(request, agent)
        data = await _body(request)
        caller, gids = _caller(request)
        holder = Holder(caller.pid, caller.uid, _job(data), caller.start_ticks, _job(data, "job_id"))
        return web.json_response(agent.lock_sm_clocks(index, holder, gids, _integer(data, "min_mhz"),
                                                      _integer(data, "max_mhz")))

    async def reset_clocks(request: web.Request) -> web.Response:
        index = _index(request, agent)
        caller, gids = _caller(request)
        return web.json_response(agent.reset_sm_clocks(index, caller, gids))

    async def release(request: web.Request) -> web.Response:
        index = _index(request, agent)
        caller, _ = _caller(request)
        return web.json_response(agent.release(index, caller))

    async def hand_over(request: web.Request) -> web.Response:
        index = _index(request, agent)
        data = await _body(request)
        caller, _ = _caller(request)
        pid = data.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise AgentError(400, f"pid must be a positive integer, the caller's child (got {pid!r})")
        return web.json_response(agent.hand_over(index, caller, pid))

    async def release_job(request: web.Request) -> web.Response:
        data = await _body(request)
        job_id = _job(data, "job_id")
        if not job_id:
            raise AgentError(400, "job_id must name the batch job whose GPUs to release (its SLURM_JOB_ID)")
        caller, _ = _caller(request)
        return web.json_response(agent.release_job(job_id, caller))

    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_errors])
    app.router.add_get("/v1/gpus", status)
    app.router.add_get("/v1/devices", devices)
    app.router.add_post("/v1/gpus/{index}/power_limit", power_limit)
    app.router.add_post("/v1/gpus/{index}/sm_clocks", lock_clocks)
    app.router.add_delete("/v1/gpus/{index}/sm_clocks", reset_clocks)
    app.router.add_post("/v1/gpus/{index}/release", release)
    app.router.add_post("/v1/gpus/{index}/holder", hand_over)
    app.router.add_post("/v1/release", release_job)
    return app


# -- serving --------------------------------------------------------------------------------------------
@dataclass
class ServeOptions:
    """Where `serve` listens: the socket and its group, the state dir, the optional metrics port."""

    socket: str
    state_dir: str
    group: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"


def socket_folder_problem(folder: Path) -> str | None:
    """Why the socket's folder cannot be trusted, or None.

    Whoever may write in it could swap the socket for a link between bind and chmod, or plant a file of
    their own there: it must be a real folder (no symbolic link), owned by the agent's user (root when
    deployed), writable by nobody else (a sticky /tmp is refused too): `wattwise.safe_files.folder_problem`.
    """
    return folder_problem(folder)


def prepare_socket(path: Path) -> None:
    """Make the socket's folder (0755), check it, and clear a stale socket.

    Raises:
        UsageError: the folder cannot be trusted (see `socket_folder_problem`), the path is not a socket,
            or an agent already listens there.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    problem = socket_folder_problem(path.parent)
    if problem:
        raise UsageError(f"--socket {path}: its folder {path.parent} {problem.removeprefix('the folder ')}; "
                         "use a folder only root may write, such as /run/wattwise")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise UsageError(f"--socket {path}: exists and is not a socket; remove it or choose another path")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # nobody listens: left behind by an agent that died
        return
    finally:
        probe.close()
    raise UsageError(f"--socket {path}: another agent already listens there")


def share_socket(path: Path, gid: int) -> None:
    """Give the socket bound at `path` to group `gid`, mode 0660, never through a symbolic link.

    The node is opened with O_PATH|O_NOFOLLOW and checked to be a socket; owner and mode are then set on
    that very node (through /proc/self/fd), so nothing swapped in at `path` is changed.

    Raises:
        UsageError: `path` is no longer the socket (something replaced it).
    """
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise UsageError(f"--socket {path}: replaced by something that is not the agent's socket; "
                             "use a folder only root may write")
        node = f"/proc/self/fd/{fd}"
        os.chown(node, -1, gid)
        os.chmod(node, 0o660)
    finally:
        os.close(fd)


def group_id(group: str | None) -> int:
    """The gid of `--group` (a name or a number); -1 (the agent's own group) when not given."""
    import grp

    if group is None:
        return -1
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise UsageError(f"--group {group}: no such group on this node (a name or a number)") from None


def share_simulated_load(devices: list[Device], gid: int) -> None:
    """Simulated backend: a load file beside each GPU's state file, writable by the socket's group (0660).

    Clients add the load they drive there; the agent counts it in its energy. The file is reset to 0 J at
    each start. Only for the simulated GPU: what clients write there is trusted, as a test's figures are.
    """
    from wattwise.devices.simulated import load_file_of
    from wattwise.safe_files import replace_file

    def write(fh: TextIO) -> None:
        fh.write(json.dumps({"load_j": 0.0}))
        os.fchown(fh.fileno(), -1, gid)
        os.fchmod(fh.fileno(), 0o660)

    for device in devices:
        simulation, state_file = device.simulation, device.spec().get("state_file")
        if simulation is None or not state_file:
            continue
        path = load_file_of(state_file)
        replace_file(path, write)  # a new file moved in place: whatever was at `path` is never written through
        simulation.count_load(path)


async def serve(agent: Agent, options: ServeOptions, ready: Callable[[], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then restore every held GPU and remove the socket."""
    gid = group_id(options.group)
    path = Path(options.socket)
    prepare_socket(path)
    loop = asyncio.get_running_loop()
    quiet_client_logs()
    raise_open_file_limit()
    agent.start_watching(loop)
    runner = web.AppRunner(make_app(agent), access_log=None, handle_signals=False, keepalive_timeout=2.0)
    await runner.setup()
    limits = ConnectionLimits(loop)
    assert runner.server is not None  # set by setup()
    previous = os.umask(0o177)  # no moment where others could connect before the chmod below
    try:
        server = await loop.create_unix_server(limits.factory(runner.server), str(path), backlog=128)
    finally:
        os.umask(previous)
    share_socket(path, gid)
    if options.metrics_port is not None:
        from wattwise.agent.metrics import start_metrics

        start_metrics(agent, options.metrics_host, options.metrics_port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        agent.restore_all()
        agent.journal.close()
        if agent.audit is not None:
            agent.audit.close()
        server.close()
        await runner.cleanup()
        with contextlib.suppress(OSError):
            path.unlink()
