"""The node's record of which GPUs the scheduler gave each job (the SLURM prolog registers them).

A user with a job registered may change only that job's GPUs; `Agent.allocation_problem` asks this
registry. The record is `jobs/registered.json` in the agent's state dir (root's, 0600), so that
registrations outlive an agent restart; in a folder of its own, so that `wattwise restore --journal-dir`
on the state dir finds only the settings journal there. Three things make a registration end with its
job, whatever the agent's state:

- GPUs are recorded by UUID, never by index: after a restart that renumbered the GPUs, a job's rights
  follow its GPUs, not the numbers they had;
- the SLURM epilog ends the registration (`DELETE /v1/jobs/J`); when the agent does not answer then, the
  epilog leaves a record of the job's end in `jobs/ended/` under the agent's state dir (`record_ended`,
  `wattwise agent end-job --state-dir`), which the agent reads at start and before each decision;
- a registration expires `registration_ttl_s` after it was made (the agent's config), so one whose end
  was never told lapses anyway.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattwise import codec
from wattwise.agent import MAX_JOB_CHARS, is_job_name
from wattwise.agent.config import DEFAULT_REGISTRATION_TTL_S
from wattwise.codec import Codec, JsonObject, Number, Whole, as_json
from wattwise.devices.agent import JobAllocationInfo
from wattwise.errors import UsageError
from wattwise.safe_files import UntrustedFile, read_trusted_json, replace_file

log = logging.getLogger(__name__)

#: The folder (in the state dir) of the agent's records of jobs.
JOBS_FOLDER = "jobs"
#: The agent's record of job allocations, in `JOBS_FOLDER`.
JOBS_FILE = "registered.json"
#: The folder (in `JOBS_FOLDER`) where the epilog records a job's end the agent was not told of.
ENDED_FOLDER = "ended"
#: Where agents before UUIDs kept their registrations (by GPU index, not recalled), beside the journal.
LEGACY_JOBS_FILE = "jobs.json"
#: A record of a few thousand jobs is far smaller; a larger file is not the agent's.
MAX_JOBS_BYTES = 4 * 1024 * 1024
#: An end record holds one job id.
MAX_ENDED_BYTES = 4096


@dataclass(frozen=True)
class JobName(Codec):
    """A job name or batch job id (`is_job_name`): a printable string of at most `MAX_JOB_CHARS`.

    Absent, it reads as None (the definition says what that means); null is refused, as any other
    non-string: whoever writes the key writes a name.
    """

    def load(self, f: JsonObject, key: str) -> str | None:
        """The name at `key`; None when the key is absent."""
        if key not in f.raw:
            return None
        value = f.raw[key]
        if not is_job_name(value):
            f.refuse(key, f"a printable string of at most {MAX_JOB_CHARS} characters", value)
        return value


@dataclass(frozen=True)
class GpuUuids(Codec):
    """A set of GPU UUIDs, written as a sorted list: each a non-empty name (`is_job_name`)."""

    def dump(self, value: Any) -> Any:
        """The UUIDs of `value`, sorted, as a JSON list."""
        return sorted(value)

    def load(self, f: JsonObject, key: str) -> frozenset[str] | None:
        """The UUIDs of the list at `key`; None when absent or null."""
        if f.raw.get(key) is None:
            return None
        uuids = f.strings(key)
        for i, uuid in enumerate(uuids):
            if not (uuid and is_job_name(uuid)):
                f.refuse(f"{key}[{i}]", "a GPU's uuid", uuid)
        return frozenset(uuids)


def _required(codec: Codec) -> Any:
    return field(metadata=as_json(codec, required=True))


@dataclass(frozen=True)
class JobAllocation:
    """The GPUs (by UUID) the scheduler gave one job of one user, and when the registration lapses.

    Its record's entry (`registered.json`) is written and read by the record codec (`wattwise.codec`),
    each key from its definition here, as every file and wire body wattwise reads.
    """

    job_id: str = _required(JobName())
    uid: int = _required(Whole())
    gpu_uuids: frozenset[str] = _required(GpuUuids())
    #: When it was registered and when it lapses (seconds since the epoch).
    registered_at_s: float = _required(Number(minimum=None))
    expires_at_s: float = _required(Number(minimum=None))

    def info(self, indices: Mapping[str, int]) -> JobAllocationInfo:
        """As the agent answers and records it; `indices`: the index of each GPU UUID on the node now."""
        return JobAllocationInfo(
            job_id=self.job_id,
            uid=self.uid,
            gpus=sorted(indices[u] for u in self.gpu_uuids if u in indices),
            gpu_uuids=sorted(self.gpu_uuids),
            registered_at_s=self.registered_at_s,
            expires_at_s=self.expires_at_s,
        )

    @classmethod
    def from_json(cls, raw: Any) -> JobAllocation | None:
        """An allocation from the record, or None when the entry is malformed (or names GPUs by index only)."""
        if not isinstance(raw, dict):
            return None
        try:
            return codec.from_json(cls, JsonObject(raw, JOBS_FILE))
        except UsageError:
            return None


def ended_record(folder: Path, job_id: str) -> Path:
    """The file recording that job `job_id` ended, under the agent's state dir `folder`."""
    return folder / JOBS_FOLDER / ENDED_FOLDER / f"{hashlib.sha256(job_id.encode()).hexdigest()[:32]}.json"


def record_ended(folder: Path, job_id: str, clock: Callable[[], float] = time.time) -> Path:
    """Record that job `job_id` ended, for the agent to read (the epilog, when the agent does not answer).

    Raises:
        OSError: The record cannot be written (the state dir is root's: run as root).
    """
    path = ended_record(folder, job_id)
    path.parent.parent.mkdir(mode=0o700, exist_ok=True)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    text = json.dumps({"job_id": job_id, "ended_at_s": clock()})
    replace_file(path, lambda fh: fh.write(text), mode=0o600)
    return path


class JobRegistry:
    """The jobs registered on the node, by job id, and their record on disk."""

    def __init__(
        self,
        folder: Path,
        uuids: Mapping[str, int],
        ttl_s: float = DEFAULT_REGISTRATION_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """The registry kept in `folder` (the agent's state dir).

        Args:
            folder: The agent's state dir.
            uuids: The index of each of the agent's GPUs, by UUID.
            ttl_s: How long a registration lasts.
            clock: Seconds since the epoch (tests pass their own).
        """
        self.folder = folder
        self.path = folder / JOBS_FOLDER / JOBS_FILE
        self.uuids = uuids
        self.ttl_s = ttl_s
        self._clock = clock
        self._ended_seen: tuple[int, int] | None = None
        self._jobs: dict[str, JobAllocation] = self._load()
        self.refresh()

    def __iter__(self) -> Iterator[JobAllocation]:
        """The allocations in force, by job id (a record of an end, or an expiry, is taken into account first)."""
        self.refresh()
        return iter(sorted(self._jobs.values(), key=lambda a: a.job_id))

    def info(self) -> list[JobAllocationInfo]:
        """The allocations in force as the agent answers them."""
        return [a.info(self.uuids) for a in self]

    def of_uid(self, uid: int) -> list[JobAllocation]:
        """The allocations in force of user `uid`'s jobs, by job id."""
        return [a for a in self if a.uid == uid]

    def gpus_of(self, allocation: JobAllocation) -> list[int]:
        """The indices of `allocation`'s GPUs among the agent's now."""
        return sorted(self.uuids[u] for u in allocation.gpu_uuids if u in self.uuids)

    def register(self, job_id: str, uid: int, gpus: list[int]) -> JobAllocation:
        """Record that job `job_id` of user `uid` was given the GPUs `gpus` (indices), replacing an earlier one.

        A record of the job's end left before (the same job id, registered again) is cleared.

        Raises:
            OSError: The record cannot be written; nothing changed.
        """
        by_index = {index: uuid for uuid, index in self.uuids.items()}
        now = self._clock()
        allocation = JobAllocation(job_id, uid, frozenset(by_index[i] for i in gpus), now, now + self.ttl_s)
        previous = self._jobs.get(job_id)
        self._jobs[job_id] = allocation
        try:
            self._save()
        except OSError:
            if previous is None:
                del self._jobs[job_id]
            else:
                self._jobs[job_id] = previous
            raise
        try:
            ended_record(self.folder, job_id).unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            log.error("wattwise agent: cannot remove the end record of job %s (%s)", job_id, err.strerror)
        return allocation

    def end(self, job_id: str, why: str = "ended") -> JobAllocation | None:
        """Forget job `job_id`; the allocation it had, None if none. A record that cannot be written is kept."""
        allocation = self._jobs.pop(job_id, None)
        if allocation is not None:
            log.info("wattwise agent: job %s of uid %d %s", job_id, allocation.uid, why)
            self._save_or_say()
        return allocation

    def refresh(self) -> None:
        """Take the epilog's records of ended jobs and the expiries into account (cheap when nothing changed)."""
        now = self._clock()
        lapsed = [a for a in self._jobs.values() if a.expires_at_s <= now]
        for allocation in lapsed:
            del self._jobs[allocation.job_id]
            log.warning(
                "wattwise agent: the registration of job %s of uid %d lapsed (registered %.0f s ago; the "
                "epilog never ended it)",
                allocation.job_id,
                allocation.uid,
                now - allocation.registered_at_s,
            )
        ended = self._read_ended()
        if lapsed or ended:
            self._save_or_say()

    def _read_ended(self) -> bool:
        """End the jobs the epilog recorded as ended, and remove those records; whether any job ended."""
        folder = self.folder / JOBS_FOLDER / ENDED_FOLDER
        try:
            st = os.stat(folder)
        except OSError:
            return False
        seen = (st.st_mtime_ns, st.st_ino)
        if seen == self._ended_seen:
            return False
        entries = sorted(folder.glob("*.json"))
        if not entries:
            self._ended_seen = seen  # a record added since changes the folder's time: looked at next time
            return False
        self._ended_seen = None
        ended_any = False
        for entry in entries:
            try:
                raw = read_trusted_json(entry, max_bytes=MAX_ENDED_BYTES, root_ok=True)
            except (OSError, UntrustedFile, ValueError) as err:
                log.error("wattwise agent: %s: %s; ignored", entry, err)
                continue
            job_id = raw.get("job_id")
            if is_job_name(job_id) and entry == ended_record(self.folder, job_id):
                allocation = self._jobs.pop(job_id, None)
                if allocation is not None:
                    ended_any = True
                    log.info(
                        "wattwise agent: job %s of uid %d ended while the agent was not answering (the "
                        "epilog's record); its registration ends",
                        job_id,
                        allocation.uid,
                    )
            try:
                entry.unlink()
            except OSError as err:
                log.error("wattwise agent: cannot remove %s (%s)", entry, err.strerror)
        return ended_any

    def _load(self) -> dict[str, JobAllocation]:
        """The allocations a previous agent recorded (its jobs may still run); none when unreadable."""
        self._drop_legacy()
        try:
            raw = read_trusted_json(self.path, max_bytes=MAX_JOBS_BYTES, root_ok=True)
        except FileNotFoundError:
            return {}
        except (UntrustedFile, ValueError) as err:
            log.error("wattwise agent: %s %s; no job allocation recalled", self.path, err)
            return {}
        jobs: dict[str, JobAllocation] = {}
        dropped = []
        for entry in raw.get("jobs", []) if isinstance(raw.get("jobs"), list) else []:
            allocation = JobAllocation.from_json(entry)
            if allocation is None:
                dropped.append(entry.get("job_id") if isinstance(entry, dict) else None)
                continue
            unseen = sorted(allocation.gpu_uuids - set(self.uuids))
            if unseen:
                log.warning(
                    "wattwise agent: job %s's GPU(s) %s are not on this node any more; kept for its other GPUs",
                    allocation.job_id,
                    ", ".join(unseen),
                )
            jobs[allocation.job_id] = allocation
        if dropped:
            # A record by GPU index (an agent before UUIDs) cannot be trusted after a renumbering: the
            # next prolog registers the job's GPUs again.
            log.error(
                "wattwise agent: %s: %d registration(s) not recalled (malformed, or naming GPUs by index "
                "only): job(s) %s",
                self.path,
                len(dropped),
                ", ".join(str(j)[:40] for j in dropped),
            )
        return jobs

    def _drop_legacy(self) -> None:
        """Remove the record an agent before UUIDs kept beside its journal (by GPU index: not recalled)."""
        legacy = self.folder / LEGACY_JOBS_FILE
        try:
            legacy.unlink()
        except FileNotFoundError:
            return
        except OSError as err:
            log.error("wattwise agent: cannot remove %s (%s)", legacy, err.strerror)
            return
        log.error(
            "wattwise agent: %s named GPUs by index, which a renumbering moves: its registrations are not "
            "recalled (the next prolog registers each job again); removed",
            legacy,
        )

    def _save(self) -> None:
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        entries = [codec.to_json_dict(a) for a in sorted(self._jobs.values(), key=lambda a: a.job_id)]
        text = json.dumps({"jobs": entries})
        replace_file(self.path, lambda fh: fh.write(text), mode=0o600)

    def _save_or_say(self) -> None:
        try:
            self._save()
        except OSError as err:
            log.error("wattwise agent: cannot write %s (%s)", self.path, err.strerror or err)
