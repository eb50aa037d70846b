"""The node agent's answers on the wire, typed: what `wattwise agent status`, clients and scripts read.

Each is a JSON object; a field is never renamed or dropped (scripts check the agent through them), new
fields may be added. `wattwise.agent.agent.Agent` builds them, `wattwise.agent.http` sends them as they are.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from wattwise.devices.base import DeviceSpec
from wattwise.vocabulary import AllocationPolicy


class HolderInfo(TypedDict):
    """Who holds a GPU: its process, user, job name, batch job and process group (null: its pid only)."""

    pid: int
    uid: int
    job: str
    job_id: str
    pgid: int | None


class GpuStatus(TypedDict):
    """One GPU as the status shows it; a reading the GPU does not support is null."""

    index: int
    uuid: str
    name: str
    power_limit_w: float | None
    default_power_limit_w: float | None
    #: `[floor, ceiling]` a user may set: the admin's bounds within the GPU's own range.
    allowed_power_limit_w: list[float] | None
    locked_sm_clocks_mhz: Any
    holder: HolderInfo | None


class GpuRelease(GpuStatus):
    """A GPU after its holder's release: restored, kept (its group runs on), not held, or failed."""

    released: Literal["restored", "kept", "not held", "failed"]


class JobAllocationInfo(TypedDict):
    """One job's allocation on the node: its batch job id, its user and the GPUs the scheduler gave it."""

    job_id: str
    uid: int
    #: The GPUs' indices on the node now (the registration follows their UUIDs over a renumbering).
    gpus: list[int]
    gpu_uuids: list[str]
    #: When it was registered, and when it lapses unless the epilog ends it first (seconds since the epoch).
    registered_at_s: float
    expires_at_s: float


class AgentStatus(TypedDict):
    """`GET /v1/gpus`: every GPU, in index order; the jobs registered and the allocation policy."""

    gpus: list[GpuStatus]
    jobs: list[JobAllocationInfo]
    #: What a user with no job registered may change: "none" (any free GPU), "registered" (nothing) or
    #: "cgroup" (the GPUs its device cgroup lets it open).
    allocation: AllocationPolicy


class DeviceList(TypedDict):
    """`GET /v1/devices`: the backend and each GPU's `Device.spec()`, so clients open the same GPUs to read."""

    backend: str
    devices: list[DeviceSpec]


class JobRelease(TypedDict):
    """`POST /v1/release`: the GPUs a batch job held, restored; those another user holds under it, kept."""

    job_id: str
    released: list[int]
    gpus: list[GpuStatus]
    #: The job's GPUs held by another user than the (non-root) caller: not the caller's to release.
    held_by_others: list[int]
