"""Who holds which GPU, and the settings to put back when the holder goes: pure bookkeeping, no I/O.

A holder is a process named by its pid and its start time (clock ticks since boot, from `/proc/PID/stat`),
so a recycled pid is never taken for the holder. A holder handed a lease by `wattwise cap` also names the
process group its work runs in (`pgid`): the lease lasts while any process of that group lives. The table
never touches a device or the clock: the agent (`wattwise.agent.agent`) asks it, then acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from wattwise.agent import is_job_name
from wattwise.devices.agent import HolderInfo
from wattwise.settings.apply import Settings
from wattwise.settings.journal import JournalledHolder


@dataclass(frozen=True)
class Holder:
    """The process holding a GPU, as the kernel named it (SO_PEERCRED), its job name and batch job id."""

    pid: int
    uid: int
    job: str = ""
    #: Start time of the process (ticks since boot): with the pid, unique over the machine's uptime.
    start_ticks: int = 0
    #: The batch system's id of the job the holder runs in (the client's `SLURM_JOB_ID`), "" when none.
    job_id: str = ""
    #: The process group the lease also follows (0: the holder's process only), and the start time of the
    #: group's leader when the lease was handed over, which tells the group from a later one of that id.
    pgid: int = 0
    pgid_ticks: int = 0

    def public(self) -> HolderInfo:
        """The holder as `wattwise agent status` shows it (`pgid` null when the lease follows its pid only)."""
        return HolderInfo(pid=self.pid, uid=self.uid, job=self.job, job_id=self.job_id, pgid=self.pgid or None)

    def journalled(self) -> JournalledHolder:
        """The holder as the journal records it: with start times, so a restarted agent can tell it."""
        return {**self.public(), "pgid": self.pgid, "start_ticks": self.start_ticks, "pgid_ticks": self.pgid_ticks}

    @classmethod
    def from_journal(cls, data: Any) -> Holder | None:
        """The holder a journal entry names (`journalled`'s form), or None when it names none or is malformed.

        A malformed job name, job id or process group is dropped (the pid and start time are what count).
        """
        if not isinstance(data, dict):
            return None
        numbers = [n for n in (data.get(k) for k in ("pid", "uid", "start_ticks")) if _count(n)]
        if len(numbers) != 3:
            return None
        pid, uid, ticks = numbers
        job, job_id = (_printable(data.get(key)) for key in ("job", "job_id"))
        pgid, pgid_ticks = data.get("pgid"), data.get("pgid_ticks")
        if not (_count(pgid) and _count(pgid_ticks)):
            pgid = pgid_ticks = 0
        return cls(pid, uid, job, ticks, job_id, pgid, pgid_ticks)

    def describe(self) -> str:
        """The holder in the agent's log lines and refusals: `pid 4242 (uid 1000, job 'bert')`."""
        job = f", job {self.job!r}" if self.job else ""
        return f"pid {self.pid} (uid {self.uid}{job})"


@dataclass
class Lease:
    """A held GPU: its holder and the settings it had before the holder's first change."""

    holder: Holder
    #: Setting name ("power_limit_w", "locked_sm_clocks_mhz") -> original value.
    originals: Settings = field(default_factory=dict)
    #: Setting name -> the value the holder last set (what an agent restart re-applies while it lives).
    applied: Settings = field(default_factory=dict)
    #: The process that handed the lease over to `holder`, its child (`wattwise cap`): it may still release it.
    delegator: Holder | None = None
    #: The GPU's energy counter when the lease began (or when a restarted agent resumed it); None: unreadable.
    start_energy_j: float | None = None


class LeaseConflict(Exception):
    """Another live process holds the GPU."""

    def __init__(self, index: int, holder: Holder) -> None:
        """GPU `index` is held by `holder`; the message names it."""
        super().__init__(
            f"GPU {index} is held by {holder.describe()}; it is released when that process ends or releases it"
        )
        self.index, self.holder = index, holder


class LeaseTable:
    """One lease per GPU index at most."""

    def __init__(self) -> None:
        """An empty table: every GPU free."""
        self._leases: dict[int, Lease] = {}

    def get(self, index: int) -> Lease | None:
        """The lease of GPU `index`, None when it is free."""
        return self._leases.get(index)

    def holder(self, index: int) -> Holder | None:
        """The holder of GPU `index`, None when it is free."""
        lease = self._leases.get(index)
        return lease.holder if lease else None

    def check(self, index: int, caller: Holder, *, or_delegator: bool = False) -> bool:
        """True when `caller` already holds `index`, False when nobody does; `LeaseConflict` otherwise.

        With `or_delegator`, the process that handed the lease over to its holder counts as holding it too.
        """
        lease = self._leases.get(index)
        if lease is None:
            return False
        if _same_process(lease.holder, caller):
            return True
        if or_delegator and lease.delegator is not None and _same_process(lease.delegator, caller):
            return True
        raise LeaseConflict(index, lease.holder)

    def hand_over(self, index: int, holder: Holder) -> None:
        """Make `holder` the holder of the held GPU `index`; the one before is kept as its delegator."""
        lease = self._leases[index]
        lease.delegator, lease.holder = lease.holder, holder

    def take(self, index: int, caller: Holder, originals: Settings, *, start_energy_j: float | None = None) -> Lease:
        """Give a free GPU to `caller`, with the settings it has now (to restore later).

        `start_energy_j` is the GPU's energy counter now, from which the lease's energy counts.
        """
        self.check(index, caller)
        lease = self._leases.get(index)
        if lease is None:
            lease = self._leases[index] = Lease(caller, dict(originals), start_energy_j=start_energy_j)
        return lease

    def release(self, index: int) -> Lease | None:
        """Drop the lease of `index` (its settings restored by the caller); the lease dropped, if any."""
        return self._leases.pop(index, None)

    def held_by(self, holder: Holder) -> list[int]:
        """The GPUs `holder` holds, in index order."""
        return sorted(i for i, lease in self._leases.items() if _same_process(lease.holder, holder))

    def held_under_job(self, job_id: str) -> list[int]:
        """The GPUs whose holder runs in batch job `job_id` (as its client said), in index order."""
        return sorted(i for i, lease in self._leases.items() if job_id and lease.holder.job_id == job_id)

    def items(self) -> list[tuple[int, Lease]]:
        """(index, lease) of every held GPU, in index order."""
        return sorted(self._leases.items())


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _printable(value: Any) -> str:
    """A journalled name as it was sent (printable, at most `MAX_JOB_CHARS`), else ""."""
    return value if is_job_name(value) else ""


def _same_process(a: Holder, b: Holder) -> bool:
    return a.pid == b.pid and a.start_ticks == b.start_ticks
