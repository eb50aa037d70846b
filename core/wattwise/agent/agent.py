"""The agent's logic: the GPUs, their leases, the journal and the audit log, with no HTTP in it.

Each request is a method of `Agent` that answers a JSON-shaped dict or raises an `AgentRefusal` naming
why (`InvalidRequest`, `NotAllowed`, `NoSuchGPU`, `Conflict`, `AgentFault`), with a one-line message.
`wattwise.agent.http` serves it over the agent's socket and maps each refusal to its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wattwise.agent.audit import AuditLog
from wattwise.agent.cgroups import CgroupAnswer, CgroupUnknown, check_gpu
from wattwise.agent.config import AgentConfig
from wattwise.agent.jobs import JobRegistry
from wattwise.agent.journal import AgentJournal
from wattwise.agent.leases import Holder, Lease, LeaseConflict, LeaseTable
from wattwise.agent.processes import (
    ProcessWatcher,
    child_as_seen_by_agent,
    group_has_members,
    holder_alive,
    parent_and_uids,
    process_alive,
    process_start_and_group,
)
from wattwise.devices.agent import (
    AgentStatus,
    DeviceList,
    GpuRelease,
    GpuStatus,
    JobAllocationInfo,
    JobRelease,
    gpu_uuid,
)
from wattwise.devices.base import Device, DeviceError, DeviceSpec, NotSupportedError
from wattwise.errors import UsageError
from wattwise.settings.apply import (
    POWER_LIMIT,
    SM_CLOCKS,
    Settings,
    apply_setting,
    originals_words,
    read_setting,
    restore_originals,
    setting_words,
)
from wattwise.settings.journal import JournalChange
from wattwise.vocabulary import AllocationPolicy, ReleaseOutcome

log = logging.getLogger(__name__)


class AgentRefusal(Exception):
    """A request the agent refuses; its message is one line, for the caller. Raised as one of its kinds."""


class InvalidRequest(AgentRefusal):
    """The request is malformed, or asks for a value outside the GPU's own range or capabilities."""


class NotAllowed(AgentRefusal):
    """The caller may not do this: not an allowed user, outside the admin's bounds, not its child or job."""


class NoSuchGPU(AgentRefusal):
    """The request names a GPU this agent does not have."""


class Conflict(AgentRefusal):
    """The GPU's lease does not allow it now: held by another process, or not held by the caller."""


class AgentFault(AgentRefusal):
    """The agent could not do it: the device failed, or its journal cannot be written."""


class Busy(AgentRefusal):
    """The caller has as many requests in progress as it may (its cgroup checks); it may ask again soon."""


#: Checks of the caller's device cgroup (`allocation: cgroup`) one user may have in progress at once.
MAX_CGROUP_CHECKS_PER_UID = 2
#: Ended leases the agent remembers for its metrics (`EndedLease`).
MAX_ENDED_LEASES = 1024


@dataclass(frozen=True)
class EndedLease:
    """A lease that ended: its GPU, holder and energy from its start to its end, and when it ended.

    The metrics go on showing its energy for a while (`wattwise.agent.metrics`), so that a scrape after
    its end counts its last joules: without it, everything since the last scrape before the end was lost.
    """

    index: int
    holder: Holder
    energy_j: float
    #: `time.monotonic()` when it ended.
    ended_s: float


@dataclass
class AgentCounts:
    """What the agent did since it started (its Prometheus self-metrics)."""

    #: Requests answered, and those refused, by HTTP status (the HTTP layer counts them).
    requests: int = 0
    refusals: dict[int, int] = field(default_factory=dict)
    #: GPUs given back with their original settings, and give-backs the device refused.
    restores: int = 0
    restore_failures: int = 0


class Agent:
    """The GPUs, their leases and the journal: each request a method, each refusal an `AgentRefusal`."""

    def __init__(
        self,
        devices: list[Device],
        backend: str,
        config: AgentConfig,
        journal: AgentJournal,
        audit: AuditLog | None = None,
    ) -> None:
        """The agent of `devices` (served by `backend`), within `config`'s bounds, journalling to `journal`.

        Args:
            devices: The node's GPUs, opened by the agent itself.
            backend: Their backend's name (`device_list` tells the clients).
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
        #: The last audit line could not be written (said once, until one can).
        self._audit_failing = False
        self.leases = LeaseTable()
        self.watcher: ProcessWatcher | None = None
        #: Journalled changes of GPUs this agent does not see: kept in the journal, never dropped.
        self.unseen: list[JournalChange] = []
        #: What the agent did since it started, for its own Prometheus metrics.
        self.counts = AgentCounts()
        #: The leases ended lately, with their energy to the end (read by the metrics thread).
        self.ended_leases: deque[EndedLease] = deque(maxlen=MAX_ENDED_LEASES)
        #: The clock of `EndedLease.ended_s` (tests pass their own).
        self.clock: Callable[[], float] = time.monotonic
        #: Asks whether a process's device cgroup may open a GPU (`allocation: cgroup`): blocking, so it
        #: runs in a worker thread (`check_allocation`), never on the event loop.
        self.cgroup_check: Callable[[int, DeviceSpec], CgroupAnswer] = check_gpu
        #: The answers of `check_allocation`, by (pid, start time, GPU), until the request that asked acts.
        self._cgroup_answers: dict[tuple[int, int, int], str | None] = {}
        #: Cgroup checks in progress, by uid.
        self._checking: dict[int, int] = {}
        #: The node's record of which GPUs the scheduler gave each job (the SLURM prolog registers them).
        self.jobs = JobRegistry(journal.folder, self.uuids, config.registration_ttl_s)

    # -- life cycle -------------------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Take over what the last agent journalled (it stopped, or crashed).

        A GPU whose holder still runs (the same pid and start time: a reused pid is not the holder) keeps
        its lease, and the holder's settings are applied again; every other GPU gets its originals back.

        Returns:
            One line per GPU restored.
        """
        originals: dict[int, Settings] = {}
        applied: dict[int, Settings] = {}
        holders: dict[int, Holder] = {}
        for change in self.journal.load():
            # By UUID, never by index alone: GPUs renumbered since (one left the bus, the agent restarted on
            # others) put a journalled GPU's originals on another GPU behind the same index otherwise.
            uuid = gpu_uuid(change["device"])
            index = self.uuids.get(uuid) if _names_gpu(change["device"]) else change["device"].get("index")
            index = index if index in self.devices else None
            if index is None:
                log.error(
                    "wattwise agent: journal names GPU %s (%s), which this agent does not see; kept",
                    change["device"].get("index"),
                    uuid,
                )
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
            if (
                holder is not None
                and holder_alive(holder)
                and self._resume(index, holder, recorded, applied.get(index, {}))
            ):
                continue
            before = {setting: _reading(self.devices[index], setting) for setting in recorded}
            restore_originals(self.devices[index], recorded)
            for setting, value in recorded.items():
                if before[setting] != value:  # a setting that was back already changed nothing
                    self._audit(holder or Holder(0, 0), index, setting, before[setting], value, "holder gone at start")
            lines.append(f"GPU {index}: {originals_words(recorded)}")
        self._save()
        return lines

    def _resume(self, index: int, holder: Holder, originals: Settings, applied: Settings) -> bool:
        """Give GPU `index` back to its live `holder` with the settings it had set; False when they fail."""
        device = self.devices[index]
        lease = self.leases.take(index, holder, originals, start_energy_j=_maybe(device.energy_j))
        try:
            for setting, asked in applied.items():
                value = self._within_bounds(device, setting, asked)
                if value != asked:
                    log.warning(
                        "wattwise agent: GPU %d: %s's %s is outside the admin's bounds now; %s instead",
                        index,
                        holder.describe(),
                        setting_words(setting, asked),
                        setting_words(setting, value),
                    )
                before = _reading(device, setting)
                apply_setting(device, setting, value)
                lease.applied[setting] = value
                if before != value:  # the GPU kept it over the restart: nothing changed
                    self._audit(holder, index, setting, before, value, "restart: holder alive")
        except (DeviceError, UsageError, TypeError, ValueError, IndexError) as err:
            log.error(
                "wattwise agent: GPU %d: cannot apply %s's settings again (%s); restoring it",
                index,
                holder.describe(),
                err,
            )
            self.leases.release(index)
            return False
        log.info(
            "wattwise agent: GPU %d stays held by %s, still running (%s)",
            index,
            holder.describe(),
            ", ".join(setting_words(s, v) for s, v in applied.items()) or "nothing set yet",
        )
        return True

    def _within_bounds(self, device: Device, setting: str, value: Any) -> Any:
        """`value` of `setting` brought within the admin's bounds in force now (a journalled one may predate them).

        A power limit outside them becomes the nearest bound; a locked clock range is narrowed to the
        admin's range (unlocked when the two do not meet). Anything else is returned as it is.
        """
        if setting == POWER_LIMIT and isinstance(value, (int, float)):
            low, high = self.allowed_power_limit_w(device)
            return min(max(float(value), low), high)
        if setting == SM_CLOCKS and isinstance(value, list) and len(value) == 2 and self.config.sm_clock_mhz:
            low, high = max(value[0], self.config.sm_clock_mhz[0]), min(value[1], self.config.sm_clock_mhz[1])
            return [low, high] if low <= high else None
        return value

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
                log.info(
                    "wattwise agent: stopping; GPU %d stays as %s set it (still running); the next agent "
                    "start keeps its lease",
                    index,
                    lease.holder.describe(),
                )
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
    def status(self) -> AgentStatus:
        """Every GPU's `gpu_status`, in index order."""
        return AgentStatus(
            gpus=[self.gpu_status(i) for i in sorted(self.devices)],
            jobs=self.jobs.info(),
            allocation=self.config.allocation,
        )

    def device_list(self) -> DeviceList:
        """The backend and each GPU's `spec`, in index order: clients open the same GPUs locally for reads."""
        return DeviceList(backend=self.backend, devices=[self.devices[i].spec() for i in sorted(self.devices)])

    def gpu_status(self, index: int) -> GpuStatus:
        """GPU `index` as the status shows it: index, uuid, name, limits, allowed range, clocks, holder.

        A reading the GPU does not support is null.
        """
        device = self.devices[index]
        holder = self.leases.holder(index)
        return GpuStatus(
            index=index,
            uuid=gpu_uuid(device.spec()),
            name=device.name,
            power_limit_w=_maybe(device.power_limit_w),
            default_power_limit_w=_maybe(lambda: device.power_limit_range().default_w),
            allowed_power_limit_w=_maybe(lambda: list(self.allowed_power_limit_w(device))),
            locked_sm_clocks_mhz=_maybe(lambda: read_setting(device, SM_CLOCKS)),
            holder=holder.public() if holder else None,
        )

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

    def set_power_limit(self, index: int, caller: Holder, gids: set[int], watts: float) -> GpuStatus:
        """Set GPU `index`'s power limit for `caller` (in groups `gids`), taking or keeping its lease.

        Returns:
            The GPU's status after the change.

        Raises:
            InvalidRequest: Outside the GPU's range (or the GPU refuses the value).
            NotAllowed: Outside the admin's bounds, or a caller not allowed.
            NoSuchGPU: No GPU `index`.
            Conflict: Held by another process.
            AgentFault: The GPU fails, or the journal cannot be written.
        """
        device = self._device(index)
        rng = _call(device.power_limit_range)
        lo, hi = rng.min_w, rng.max_w
        if not lo <= watts <= hi:
            raise InvalidRequest(f"power limit {watts:g} W is outside GPU {index}'s range [{lo:g}, {hi:g}] W")
        alo, ahi = _call(lambda: self.allowed_power_limit_w(device))
        if not alo <= watts <= ahi:
            raise NotAllowed(
                f"power limit {watts:g} W is outside the range the admin allows on GPU {index} [{alo:g}, {ahi:g}] W"
            )
        return self._change(index, caller, gids, POWER_LIMIT, watts)

    def lock_sm_clocks(self, index: int, caller: Holder, gids: set[int], min_mhz: int, max_mhz: int) -> GpuStatus:
        """Lock GPU `index`'s SM clocks to [min_mhz, max_mhz] for `caller`, taking or keeping its lease.

        Returns:
            The GPU's status after the change.

        Raises:
            AgentRefusal: As `set_power_limit`, for a clock range outside the GPU's or the admin's.
        """
        device = self._device(index)
        supported = _call(device.supported_sm_clocks_mhz)
        lo, hi = min(supported), max(supported)
        if not lo <= min_mhz <= max_mhz <= hi:
            raise InvalidRequest(
                f"SM clock range [{min_mhz}, {max_mhz}] MHz is outside GPU {index}'s [{lo}, {hi}] MHz (min first)"
            )
        if self.config.sm_clock_mhz is not None:
            alo, ahi = max(lo, self.config.sm_clock_mhz[0]), min(hi, self.config.sm_clock_mhz[1])
            if not alo <= min_mhz <= max_mhz <= ahi:
                raise NotAllowed(
                    f"SM clock range [{min_mhz}, {max_mhz}] MHz is outside the range the admin "
                    f"allows [{alo}, {ahi}] MHz"
                )
        return self._change(index, caller, gids, SM_CLOCKS, [min_mhz, max_mhz])

    def reset_sm_clocks(self, index: int, caller: Holder, gids: set[int]) -> GpuStatus:
        """Unlock GPU `index`'s SM clocks for `caller` (the original stays recorded for the restore).

        Raises:
            AgentRefusal: As `set_power_limit`.
        """
        self._device(index)
        return self._change(index, caller, gids, SM_CLOCKS, None)

    def release(self, index: int, caller: Holder) -> GpuRelease:
        """The holder gives the GPU back: its original settings are restored now.

        The process that handed its lease over (`wattwise cap`, after its command ended) releases too,
        unless the command has ended while other processes of its process group still run: the lease
        follows them, and stays.

        Returns:
            The GPU's status, with `released`: "restored" (by this request), "not held" (the caller held
            nothing: the agent restored it already, when its holder ended), "kept" (held on by the
            command's process group) or "failed" (the GPU refused its originals; still held, see the log).

        Raises:
            Conflict: Another process holds the GPU.
            NoSuchGPU: No GPU `index`.
        """
        self._device(index)
        try:
            held = self.leases.check(index, caller, or_delegator=True)
        except LeaseConflict as err:
            raise Conflict(f"{err}; only its holder may release it") from None
        lease = self.leases.get(index)
        if not held or lease is None:
            return GpuRelease(**self.gpu_status(index), released=ReleaseOutcome.NOT_HELD)
        holder = lease.holder
        if not process_alive(holder) and holder.pgid and group_has_members(holder.pgid, holder.pgid_ticks):
            log.info(
                "wattwise agent: GPU %d stays held: %s ended, other processes of its group %d run on",
                index,
                holder.describe(),
                holder.pgid,
            )
            return GpuRelease(**self.gpu_status(index), released=ReleaseOutcome.KEPT)
        self._give_back(index, "released")
        restored = self.leases.get(index) is None  # else the device refused (the log says why); still held
        return GpuRelease(
            **self.gpu_status(index), released=ReleaseOutcome.RESTORED if restored else ReleaseOutcome.FAILED
        )

    # -- allocations: which GPUs the scheduler gave each job ---------------------------------------------
    def allocation_problem(self, caller: Holder, index: int) -> str | None:
        """Why `caller` may not change GPU `index`, as the node's record of allocations says; None if it may.

        Root may change any GPU. A user with a job registered on the node may change only the GPUs of their
        jobs, whatever the policy; a user with none, what the admin's `allocation` policy says (`cgroup`:
        the GPUs the caller's device cgroup lets it open, `wattwise.agent.cgroups`).
        """
        uid = caller.uid
        if uid == 0:
            return None
        mine = self.jobs.of_uid(uid)
        if mine:
            if self.uuids_of(index) & {u for a in mine for u in a.gpu_uuids}:
                return None
            jobs = ", ".join(
                f"job {a.job_id}: GPU(s) {', '.join(map(str, self.jobs.gpus_of(a))) or 'none on this node now'}"
                for a in mine
            )
            return (
                f"GPU {index} is outside the allocation of uid {uid} ({jobs}); a job may change only the "
                "GPUs its scheduler gave it"
            )
        if self.config.allocation == AllocationPolicy.REGISTERED:
            return (
                f"uid {uid} has no job registered on this node, and the agent's allocation policy is "
                "`registered` (the SLURM prolog registers each job's GPUs)"
            )
        if self.config.allocation == AllocationPolicy.CGROUP:
            return self._cgroup_allocation_problem(caller, index)
        return None

    def _cgroup_decides(self, caller: Holder, index: int) -> bool:
        """Whether a change `caller` asks on GPU `index` needs its device cgroup checked.

        Under `allocation: cgroup`, for a user other than root with no job registered, unless the caller
        holds the GPU already: it was checked when it took the lease, and its answer holds for the lease
        (a process cannot widen its own device cgroup).
        """
        if caller.uid == 0 or self.config.allocation != AllocationPolicy.CGROUP or index not in self.devices:
            return False
        if self.jobs.of_uid(caller.uid):
            return False
        try:
            return not self.leases.check(index, caller)
        except LeaseConflict:
            return True

    async def check_allocation(self, caller: Holder, index: int) -> None:
        """Ask the kernel, off the event loop, whether `caller`'s device cgroup may open GPU `index`.

        The HTTP layer awaits this before a change; the change then uses the answer (and `forget_check`
        drops it). Each user may have `MAX_CGROUP_CHECKS_PER_UID` checks in progress; the check itself
        ends within `wattwise.agent.cgroups.PROBE_TIMEOUT_S`. Other clients are served meanwhile.

        Raises:
            Busy: The caller's user has as many checks in progress as it may.
        """
        if not self._cgroup_decides(caller, index):
            return
        uid = caller.uid
        if self._checking.get(uid, 0) >= MAX_CGROUP_CHECKS_PER_UID:
            raise Busy(
                f"uid {uid} has {MAX_CGROUP_CHECKS_PER_UID} cgroup checks in progress already; ask again "
                "when one has ended"
            )
        self._checking[uid] = self._checking.get(uid, 0) + 1
        try:
            problem = await asyncio.to_thread(self._cgroup_problem, caller, index, self.devices[index].spec())
        finally:
            left = self._checking.pop(uid) - 1
            if left:
                self._checking[uid] = left
        self._cgroup_answers[(caller.pid, caller.start_ticks, index)] = problem

    def forget_check(self, caller: Holder, index: int) -> None:
        """Drop `check_allocation`'s answer for `caller` and GPU `index` (its request has acted on it)."""
        self._cgroup_answers.pop((caller.pid, caller.start_ticks, index), None)

    def _cgroup_allocation_problem(self, caller: Holder, index: int) -> str | None:
        if not self._cgroup_decides(caller, index):
            return None  # the lease's holder was checked when it took it
        key = (caller.pid, caller.start_ticks, index)
        if key in self._cgroup_answers:
            return self._cgroup_answers.pop(key)
        # A caller in this process (a test, a tool) that did not ask `check_allocation` first.
        return self._cgroup_problem(caller, index, self.devices[index].spec())

    def _cgroup_problem(self, caller: Holder, index: int, spec: DeviceSpec) -> str | None:
        """`allocation: cgroup`: why the caller's device cgroup does not let it open GPU `index`; None if it does.

        Blocking (`cgroup_check`): called in a worker thread by `check_allocation`.
        """
        try:
            answer = self.cgroup_check(caller.pid, spec)
        except CgroupUnknown as err:
            return (
                f"GPU {index}: the agent cannot tell whether pid {caller.pid} may use it ({err}); its "
                "allocation policy is `cgroup`"
            )
        if not process_alive(caller):  # the cgroup read may be another process's, which took the pid since
            return f"GPU {index}: pid {caller.pid} ended while its cgroup was checked"
        if answer.may_open:
            return None
        return (
            f"GPU {index} is outside the allocation of pid {caller.pid} (uid {caller.uid}): its device "
            f"cgroup {answer.cgroup} may not open {answer.node}; a job may change only the GPUs its container "
            "or job was given"
        )

    def register_job(self, job_id: str, uid: int, gpus: list[int], caller: Holder) -> JobAllocationInfo:
        """Record that the scheduler gave job `job_id` of user `uid` the GPUs `gpus` (the SLURM prolog's call).

        Raises:
            NotAllowed: The caller is not root.
            NoSuchGPU: A GPU is not one of this node's.
            AgentFault: The record cannot be written (nothing changed).
        """
        if caller.uid != 0:
            raise NotAllowed("only root registers a job's GPUs (the SLURM prolog runs as root)")
        for index in gpus:
            self._device(index)
        try:
            allocation = self.jobs.register(job_id, uid, gpus)
        except OSError as err:
            raise AgentFault(
                f"cannot write the agent's record of jobs ({err.strerror or err}); nothing changed"
            ) from None
        log.info(
            "wattwise agent: job %s of uid %d registered with GPU(s) %s (%s), until %s",
            job_id,
            uid,
            sorted(gpus),
            ", ".join(sorted(allocation.gpu_uuids)),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(allocation.expires_at_s)),
        )
        return allocation.info(self.uuids)

    def end_job(self, job_id: str, caller: Holder) -> JobAllocationInfo | None:
        """Forget job `job_id`'s allocation (the SLURM epilog's call); the allocation it had, None if none.

        Raises:
            NotAllowed: The caller is not root.
        """
        if caller.uid != 0:
            raise NotAllowed("only root ends a job's registration (the SLURM epilog runs as root)")
        allocation = self.jobs.end(job_id)
        return allocation.info(self.uuids) if allocation is not None else None

    def release_job(self, job_id: str, caller: Holder) -> JobRelease:
        """Restore every GPU the caller may release under batch job `job_id` and drop those leases (the epilog).

        Whatever process holds them, even one the caller cannot see (another PID namespace): the holder's
        client named the job (`SLURM_JOB_ID`) when it leased. Root releases every GPU of the job; another
        user only the leases of their own processes: a lease of another user that names the same job id
        (a job id is only what a client said) stays, and the answer names it (`held_by_others`).

        Returns:
            `{"job_id", "released": [indices restored], "gpus": [the status of each GPU released or
            tried], "held_by_others": [indices of the job's GPUs another user holds]}`.
        """
        held = [(i, lease) for i, lease in self.leases.items() if i in set(self.leases.held_under_job(job_id))]
        others = [i for i, lease in held if caller.uid not in (0, lease.holder.uid)]
        mine = [(i, lease) for i, lease in held if i not in others]
        if others:
            log.warning(
                "wattwise agent: uid %d releases job %r: GPU(s) %s of the job are another user's; kept",
                caller.uid,
                job_id,
                others,
            )
        for index, lease in mine:
            log.info(
                "wattwise agent: uid %d releases job %r: restoring GPU %d of %s",
                caller.uid,
                job_id,
                index,
                lease.holder.describe(),
            )
            self._give_back(index, f"job released by uid {caller.uid}")
        indices = [i for i, _ in mine]
        released = [i for i in indices if self.leases.get(i) is None]
        return JobRelease(
            job_id=job_id, released=released, gpus=[self.gpu_status(i) for i in indices], held_by_others=others
        )

    def hand_over(self, index: int, caller: Holder, pid: int) -> GpuStatus:
        """The holder makes its child process `pid` the GPU's holder (`wattwise cap` and the command it runs).

        The lease then lasts as long as the child lives, or another process of the child's process group
        when that group is the command's own (the child or the caller leads it): a shell script that starts
        the work in a child and exits leaves it capped. Whatever happens to the caller (killing the
        `wattwise cap` wrapper leaves its command capped); the caller may still release it. The child must
        be the caller's own (its parent) and run as the same user. `pid` is the number the caller knows:
        a caller in a container (its own PID namespace) sends its child's pid there, which the agent finds
        among the caller's children (`child_as_seen_by_agent`); the holder then shows the agent's pid.

        A child that has ended already (the caller has not reaped it yet) is still handed the lease when
        other processes of its group run: a command that starts its work in the background and exits at
        once is no race.

        Raises:
            Conflict: The caller does not hold the GPU, or the child ended leaving nothing of its group
                running.
            NotAllowed: `pid` is not the caller's child of the same user (or is gone).
            NoSuchGPU: No GPU `index`.
        """
        self._device(index)
        try:
            held = self.leases.check(index, caller)
        except LeaseConflict as err:
            raise Conflict(f"{err}; only its holder may hand it over") from None
        lease = self.leases.get(index)
        if not held or lease is None:
            raise Conflict(f"GPU {index} is not held by pid {caller.pid}; set a limit first")
        sent, pid = pid, child_as_seen_by_agent(caller.pid, pid) or 0  # sent: in the caller's PID namespace
        found = parent_and_uids(pid) if pid else None
        started = process_start_and_group(pid, ended_too=True) if pid else None
        ticks, pgid = started if started else (None, None)
        if found is None or ticks is None or found[0] != caller.pid or found[1] != {caller.uid}:
            raise NotAllowed(
                f"pid {sent} is not a running child of pid {caller.pid} of the same user; a "
                "GPU is handed over only to the caller's own child"
            )
        # The lease follows the child's process group when the group is the command's own: the child leads
        # it, or the caller does (a shell's job). Not a group of others' (a batch script's).
        leader_ticks = {pid: ticks, caller.pid: caller.start_ticks}.get(pgid or 0)
        child = Holder(
            pid,
            caller.uid,
            lease.holder.job,
            ticks,
            lease.holder.job_id,
            pgid if pgid and leader_ticks else 0,
            leader_ticks or 0,
        )
        if not holder_alive(child):
            raise Conflict(
                f"pid {pid} has ended and no process of its group runs: nothing to hand GPU "
                f"{index} over to; it stays held by pid {caller.pid}"
            )
        self.leases.hand_over(index, child)
        with contextlib.suppress(OSError):  # the originals are journalled already; this names the new holder
            self._save()
        if self.watcher is not None:
            self.watcher.watch(child)
            if not self.leases.held_by(caller):
                self.watcher.unwatch(caller)
        log.info("wattwise agent: GPU %d handed over by pid %d to its child %s", index, caller.pid, child.describe())
        return self.gpu_status(index)

    # -- internals --------------------------------------------------------------------------------------
    def uuids_of(self, index: int) -> set[str]:
        """The UUID of GPU `index` (a set: empty when no such GPU)."""
        return {uuid for uuid, i in self.uuids.items() if i == index}

    def _device(self, index: int) -> Device:
        device = self.devices.get(index)
        if device is None:
            raise NoSuchGPU(f"no GPU {index} on this node (GPUs: {sorted(self.devices)})")
        return device

    def _change(self, index: int, caller: Holder, gids: set[int], setting: str, value: Any) -> GpuStatus:
        if not self.config.allows(caller.uid, gids):
            raise NotAllowed(
                f"uid {caller.uid} may not change GPU settings on this node "
                "(the agent's config lists the allowed users and groups)"
            )
        outside = self.allocation_problem(caller, index)
        if outside is not None:
            self._audit(caller, index, setting, _reading(self.devices[index], setting), value, f"refused: {outside}")
            raise NotAllowed(outside)
        try:
            held = self.leases.check(index, caller)
        except LeaseConflict as err:
            raise Conflict(str(err)) from None
        if not held:
            device = self.devices[index]
            self.leases.take(index, caller, _read_originals(device), start_energy_j=_maybe(device.energy_j))
            try:
                self._save()  # the originals are on disk before the first change
            except OSError as err:
                self.leases.release(index)
                raise AgentFault(f"cannot write the agent's journal ({err.strerror or err}); nothing changed") from None
            if self.watcher is not None:
                self.watcher.watch(caller)
            log.info("wattwise agent: GPU %d now held by %s", index, caller.describe())
        device = self.devices[index]
        before = _reading(device, setting)
        try:
            _call(lambda: apply_setting(device, setting, value))
        except AgentRefusal:
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
            self.counts.restore_failures += 1
            log.error("wattwise agent: could not restore GPU %d (%s); kept in the journal", index, err)
            return
        self.counts.restores += 1
        self._remember_ended(index, lease)
        for setting, value in lease.originals.items():
            if before[setting] != value:
                self._audit(lease.holder, index, setting, before[setting], value, why)
        self.leases.release(index)
        self._save()
        if self.watcher is not None and not self.leases.held_by(lease.holder):
            self.watcher.unwatch(lease.holder)

    def _remember_ended(self, index: int, lease: Lease) -> None:
        """Keep the energy of `lease` from its start to now, its end, for the metrics."""
        if lease.start_energy_j is None:
            return
        try:
            joules = self.devices[index].energy_j()
        except DeviceError:
            return
        self.ended_leases.append(EndedLease(index, lease.holder, max(0.0, joules - lease.start_energy_j), self.clock()))

    def _save(self) -> None:
        """Journal the originals of every held GPU (and those of GPUs not seen): the settings journal's format.

        Each change also names its holder (pid, uid, job, start time) and the value the holder set, if any:
        what the next agent start needs to keep a live holder's lease (other readers ignore both).
        """
        changes: list[JournalChange] = []
        for index, lease in self.leases.items():
            for setting, value in lease.originals.items():
                change: JournalChange = {
                    "device": self.devices[index].spec(),
                    "setting": setting,
                    "original": value,
                    "holder": lease.holder.journalled(),
                }
                if setting in lease.applied:
                    change["applied"] = lease.applied[setting]
                changes.append(change)
        self.journal.save(changes + self.unseen)

    def _audit(self, holder: Holder, index: int, setting: str, old: Any, new: Any, why: str) -> None:
        if self.audit is None:
            return
        try:
            spec = self.devices[index].spec()
            self.audit.record(
                uid=holder.uid,
                pid=holder.pid,
                job=holder.job,
                device_spec={**spec, "uuid": gpu_uuid(spec)},  # the status's, a simulated GPU's too
                setting=setting,
                old=old,
                new=new,
                why=why,
            )
        except (OSError, ValueError) as err:
            if not self._audit_failing:  # one line until it can be written again (a full disk fails on)
                log.error(
                    "wattwise agent: cannot write the audit log %s (%s); changes go on, not audited, until "
                    "it can be written again",
                    self.audit.path,
                    getattr(err, "strerror", None) or err,
                )
            self._audit_failing = True
            return
        if self._audit_failing:
            log.warning("wattwise agent: the audit log %s is written again", self.audit.path)
            self._audit_failing = False


def _names_gpu(spec: DeviceSpec) -> bool:
    """Whether a journalled spec names its GPU beyond its index (a UUID, a simulated GPU's state file).

    An agent before the settings package journalled indices only: its entries are matched by index.
    """
    return bool(spec.get("uuid") or spec.get("state_file"))


def _read_originals(device: Device) -> Settings:
    originals: Settings = {}
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
    """A device call; its refusal becomes a one-line `InvalidRequest` (bad value) or `AgentFault` (device failure)."""
    try:
        return fn()
    except NotSupportedError as err:
        raise InvalidRequest(str(err)) from None
    except UsageError as err:
        raise InvalidRequest(str(err)) from None
    except DeviceError as err:
        raise AgentFault(f"device error: {err}") from None
