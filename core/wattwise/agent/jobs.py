"""The node's record of which GPUs the scheduler gave each job (the SLURM prolog registers them).

A user with a job registered may change only that job's GPUs; `Agent.allocation_problem` asks this
registry. The record is `jobs.json` beside the agent's journal (root's, 0600), so that registrations
outlive an agent restart.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wattwise.agent import is_job_name
from wattwise.agent.wire import JobAllocationInfo
from wattwise.safe_files import UntrustedFile, read_trusted_json, replace_file

log = logging.getLogger(__name__)

#: The agent's record of job allocations, beside its journal in the state dir.
JOBS_FILE = "jobs.json"
#: A record of a few thousand jobs is far smaller; a larger file is not the agent's.
MAX_JOBS_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class JobAllocation:
    """The GPUs (node indices) the scheduler gave one job of one user."""

    job_id: str
    uid: int
    gpus: frozenset[int]

    def info(self) -> JobAllocationInfo:
        """As the agent answers and records it."""
        return JobAllocationInfo(job_id=self.job_id, uid=self.uid, gpus=sorted(self.gpus))

    @classmethod
    def from_json(cls, raw: Any) -> JobAllocation | None:
        """An allocation from the record, or None when the entry is malformed."""
        if not isinstance(raw, dict):
            return None
        job_id, uid, gpus = raw.get("job_id"), raw.get("uid"), raw.get("gpus")
        if not (
            is_job_name(job_id)
            and type(uid) is int
            and uid >= 0
            and isinstance(gpus, list)
            and all(type(i) is int and i >= 0 for i in gpus)
        ):
            return None
        return cls(job_id, uid, frozenset(gpus))


class JobRegistry:
    """The jobs registered on the node, by job id, and their record on disk."""

    def __init__(self, folder: Path, has_gpu: Callable[[int], bool]) -> None:
        """The registry kept in `folder` (the agent's state dir); `has_gpu(index)`: a GPU of this agent's."""
        self.path = folder / JOBS_FILE
        self._has_gpu = has_gpu
        self._jobs: dict[str, JobAllocation] = self._load()

    def __iter__(self) -> Iterator[JobAllocation]:
        """The allocations, by job id."""
        return iter(sorted(self._jobs.values(), key=lambda a: a.job_id))

    def __len__(self) -> int:
        return len(self._jobs)

    def of_uid(self, uid: int) -> list[JobAllocation]:
        """The allocations of user `uid`'s jobs, by job id."""
        return [a for a in self if a.uid == uid]

    def register(self, allocation: JobAllocation) -> None:
        """Record `allocation` (replacing the job's earlier one).

        Raises:
            OSError: The record cannot be written; nothing changed.
        """
        previous = self._jobs.get(allocation.job_id)
        self._jobs[allocation.job_id] = allocation
        try:
            self._save()
        except OSError:
            if previous is None:
                del self._jobs[allocation.job_id]
            else:
                self._jobs[allocation.job_id] = previous
            raise

    def end(self, job_id: str) -> JobAllocation | None:
        """Forget job `job_id`; the allocation it had, None if none. A record that cannot be written is kept."""
        allocation = self._jobs.pop(job_id, None)
        if allocation is not None:
            try:
                self._save()
            except OSError as err:
                log.error("wattwise agent: cannot write %s (%s)", self.path, err.strerror or err)
        return allocation

    def _load(self) -> dict[str, JobAllocation]:
        """The allocations a previous agent recorded (its jobs may still run); none when unreadable."""
        try:
            raw = read_trusted_json(self.path, max_bytes=MAX_JOBS_BYTES, root_ok=True)
        except FileNotFoundError:
            return {}
        except (UntrustedFile, ValueError) as err:
            log.error("wattwise agent: %s %s; no job allocation recalled", self.path, err)
            return {}
        jobs: dict[str, JobAllocation] = {}
        for entry in raw.get("jobs", []) if isinstance(raw.get("jobs"), list) else []:
            allocation = JobAllocation.from_json(entry)
            if allocation is not None and all(self._has_gpu(i) for i in allocation.gpus):
                jobs[allocation.job_id] = allocation
        return jobs

    def _save(self) -> None:
        text = json.dumps({"jobs": [a.info() for a in self]})
        replace_file(self.path, lambda fh: fh.write(text), mode=0o600)
