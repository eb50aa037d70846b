"""The `agent` device backend: reads stay local, setting changes go to the node agent.

`AgentGPU` wraps the GPU this process can read itself (NVML needs no privilege to read; the simulated
GPU shares the agent's state file) and relays `set_power_limit_w`, `lock_sm_clocks_mhz` and
`reset_sm_clocks` to the agent over its Unix socket (`$WATTWISE_AGENT_SOCKET`, default
`/run/wattwise/agent.sock`) through `AgentClient`, with the job name the agent shows for the holder
(`Device.name_job`). The agent's refusals become `NoPermissionError` (held by another process, not
allowed) or `DeviceError` (bad value), with the agent's one-line reason. The settings guard changes these
GPUs like any other, but neither locks nor journals them (`Device.settings_lease`: the agent restores
them) and gives them back with `release` when it restores (see `wattwise.settings.guard`).

This module is the client side of the agent's protocol (its socket, its HTTP calls, the longest job
name) and holds the protocol's wire, typed: each request body and each answer is a TypedDict here, so the
agent (`wattwise.agent`, which sits on top of `wattwise.devices` and imports it from here, never the other
way round) builds the very shapes its clients read. A field is never renamed or dropped (scripts check the
agent through them); new fields may be added. The client checks each answer with the record codec's
reader (`wattwise.codec.JsonObject`) before it hands it on: an answer of another shape is a
one-line `DeviceError` naming the field, never a `KeyError` further on.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import socket
import time
import urllib.parse
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypedDict, TypeGuard, cast

from wattwise.codec import FIX, JsonObject
from wattwise.devices.base import (
    Device,
    DeviceDescription,
    DeviceError,
    DeviceSpec,
    NoPermissionError,
    PowerLimitRange,
    Simulation,
)
from wattwise.devices.registry import Wanted
from wattwise.errors import UsageError, plugin_warning
from wattwise.vocabulary import AllocationPolicy, ReleaseOutcome

#: Where the agent listens unless told otherwise, and the variable that tells clients where it is.
DEFAULT_SOCKET = "/run/wattwise/agent.sock"
SOCKET_ENV = "WATTWISE_AGENT_SOCKET"
#: The longest job name the agent shows for a holder.
MAX_JOB_CHARS = 128
#: The batch system's job id a client sends with its lease, so that `wattwise agent release --job` (a
#: SLURM epilog) can give back what a finished job holds.
JOB_ID_ENV = "SLURM_JOB_ID"

#: Seconds to wait for the agent (it answers in milliseconds; a stuck agent must not hang training).
TIMEOUT_S = 10.0
#: The longest pause between two connects while the agent's listen backlog is full.
CONNECT_RETRY_MAX_S = 0.1
#: A release this soon after `settings_lifted` found the limit in force does not ask again (seconds).
LIFT_CHECK_FRESH_S = 1.0


# -- the wire: what clients send and what the agent answers ----------------------------------------------
class PowerLimitRequest(TypedDict):
    """`POST /v1/gpus/{gpu}/power_limit`: the limit (W), the holder's job name and its batch job id."""

    watts: float
    job: str
    job_id: str


class ClockLockRequest(TypedDict):
    """`POST /v1/gpus/{gpu}/sm_clocks`: the SM clock range (MHz), the holder's job name and batch job id."""

    min_mhz: int
    max_mhz: int
    job: str
    job_id: str


class HandOverRequest(TypedDict):
    """`POST /v1/gpus/{gpu}/holder`: the caller's child that becomes the holder."""

    pid: int


class JobRegistration(TypedDict):
    """`POST /v1/jobs`: the GPUs (indices or UUIDs) the scheduler gave batch job `job_id` of user `uid`."""

    job_id: str
    uid: int
    gpus: list[int | str]


class JobReleaseRequest(TypedDict):
    """`POST /v1/release`: the batch job whose GPUs to restore."""

    job_id: str


RequestBody = PowerLimitRequest | ClockLockRequest | HandOverRequest | JobRegistration | JobReleaseRequest


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
    #: `[min, max]` MHz, or null when unlocked.
    locked_sm_clocks_mhz: list[int] | None
    holder: HolderInfo | None


#: What a release did (`ReleaseOutcome`), as the agent's answer spells it.
Released = ReleaseOutcome | Literal["restored", "kept", "not held", "failed"]


class GpuRelease(GpuStatus):
    """A GPU after its holder's release, and what the release did."""

    released: Released


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


class JobEnd(TypedDict):
    """`DELETE /v1/jobs/{job_id}`: the job, and the allocation it had (null: none was registered)."""

    job_id: str
    ended: JobAllocationInfo | None


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


# -- checking an answer -------------------------------------------------------------------------------------
# Each check reads the fields the client relies on through the codec's reader, which refuses a value of
# another type naming the field; keys it does not know are left as they are (an agent may add fields).
def _check_gpu(f: JsonObject) -> None:
    if f.opt_int("index") is None:
        f.missing("index")
    for text in ("uuid", "name"):
        f.opt_text(text)
    for watts in ("power_limit_w", "default_power_limit_w"):
        f.opt_number(watts)
    for pair in ("allowed_power_limit_w", "locked_sm_clocks_mhz"):
        f.numbers(pair)
    holder = f.opt_object("holder")
    if holder is not None:
        for whole in ("pid", "uid"):
            holder.opt_int(whole)
        for text in ("job", "job_id"):
            holder.opt_text(text)


def _check_release(f: JsonObject) -> None:
    _check_gpu(f)
    released = f.opt_text("released")
    if released is not None and released not in tuple(ReleaseOutcome):
        f.refuse("released", f"one of {', '.join(ReleaseOutcome)}", released)


def _check_allocation(f: JsonObject) -> None:
    f.opt_text("job_id")
    f.opt_int("uid")
    f.numbers("gpus")
    f.strings("gpu_uuids")
    for when in ("registered_at_s", "expires_at_s"):
        f.opt_number(when)


def _check_status(f: JsonObject) -> None:
    for gpu in f.objects("gpus"):
        _check_gpu(gpu)
    for job in f.objects("jobs"):
        _check_allocation(job)
    f.opt_text("allocation")


def _check_device_list(f: JsonObject) -> None:
    f.opt_text("backend")
    for spec in f.objects("devices"):
        spec.text("backend")
        if spec.opt_int("index") is None:
            spec.missing("index")


def _check_job_end(f: JsonObject) -> None:
    f.opt_text("job_id")
    ended = f.opt_object("ended")
    if ended is not None:
        _check_allocation(ended)


def _check_job_release(f: JsonObject) -> None:
    f.opt_text("job_id")
    for indices in ("released", "held_by_others"):
        f.numbers(indices)
    for gpu in f.objects("gpus"):
        _check_gpu(gpu)


class AgentUnreachable(DeviceError):
    """No agent answered: none listens at the socket, or the connection failed or timed out."""


def is_job_name(value: object) -> TypeGuard[str]:
    """Whether `value` may name a lease's job or batch job: a printable string of at most `MAX_JOB_CHARS`."""
    return isinstance(value, str) and len(value) <= MAX_JOB_CHARS and value.isprintable()


def batch_job_id() -> str:
    """This process's batch job id (`$SLURM_JOB_ID`), as the agent records it with a lease; "" when none.

    A value the agent would refuse (unprintable, longer than `MAX_JOB_CHARS`) is not sent, and one warning
    says so: the epilog's `release --job` would not find this process's leases by it.
    """
    job_id = os.environ.get(JOB_ID_ENV, "")
    if is_job_name(job_id):
        return job_id
    _warn_bad_job_id(job_id)
    return ""


@functools.cache
def _warn_bad_job_id(job_id: str) -> None:
    shown = job_id[:40].encode("unicode_escape").decode("ascii") + ("..." if len(job_id) > 40 else "")
    plugin_warning(
        f"wattwise: {JOB_ID_ENV}={shown!r} is not a job id the node agent accepts (printable, at most "
        f"{MAX_JOB_CHARS} characters); this process's leases carry no job id, so `wattwise agent release "
        "--job` (the SLURM epilog) does not find them by it"
    )


def _gpu_url(gpu: int | str, action: str) -> str:
    """`/v1/gpus/{gpu}/{action}`: the GPU named by its index or its UUID."""
    return f"/v1/gpus/{urllib.parse.quote(str(gpu), safe='')}/{action}"


def socket_path(path: str | os.PathLike[str] | None = None) -> str:
    """`path`, else `$WATTWISE_AGENT_SOCKET`, else the default socket."""
    return os.fspath(path) if path else (os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        """Connect, waiting for a place in the agent's listen backlog until the deadline.

        A Unix socket's connect with a timeout fails at once with EAGAIN while the agent's backlog is full
        (another client connecting in a loop keeps it so); the client tries again, backing off from 5 ms to
        100 ms, until `timeout` has passed, as a blocking connect would wait for its turn.
        """
        deadline = time.monotonic() + (self.timeout if self.timeout is not None else TIMEOUT_S)
        pause_s = 0.005
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                sock.connect(self._path)
            except BlockingIOError:  # EAGAIN: the backlog is full now
                sock.close()
                if time.monotonic() + pause_s >= deadline:
                    raise TimeoutError(f"its listen backlog stayed full for {self.timeout:g} s") from None
                time.sleep(pause_s)
                pause_s = min(2 * pause_s, CONNECT_RETRY_MAX_S)
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return


class AgentClient:
    """A few JSON calls to the agent, one connection each (a lease belongs to the process, not to it)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = TIMEOUT_S) -> None:
        self.path = socket_path(path)
        self.timeout = timeout

    def request(
        self, method: str, url: str, body: RequestBody | None = None, check: Callable[[JsonObject], None] | None = None
    ) -> object:
        """One HTTP call to the agent over its socket.

        Args:
            method: The HTTP method.
            url: The path, e.g. "/v1/gpus".
            body: A JSON body, or None.
            check: Checks the answer, a JSON object (raising the codec's `UsageError` for a field of
                another type); None: any JSON answer is taken.

        Returns:
            The agent's JSON answer.

        Raises:
            NoPermissionError: The socket may not be opened, or the agent refused (held by another process,
                not allowed by the admin's bounds).
            AgentUnreachable: No agent answers (a `DeviceError`).
            DeviceError: It answered an error (a bad value), no JSON, or an answer `check` refuses.
        """
        conn = _UnixConnection(self.path, self.timeout)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, url, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except PermissionError:
            raise NoPermissionError(
                f"wattwise agent: cannot open its socket {self.path}: permission denied "
                "(the admin adds you to the socket's group)"
            ) from None
        except (FileNotFoundError, ConnectionRefusedError) as err:
            raise AgentUnreachable(
                f"wattwise agent: none answers at {self.path} ({err.strerror}); start one with "
                f"`wattwise agent serve` or set {SOCKET_ENV}"
            ) from None
        except (OSError, http.client.HTTPException) as err:
            raise AgentUnreachable(f"wattwise agent at {self.path}: {err}") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw)
        except ValueError:
            raise DeviceError(f"wattwise agent at {self.path}: answered HTTP {response.status} without JSON") from None
        if response.status >= 400:
            message = data.get("error", f"HTTP {response.status}") if isinstance(data, dict) else str(data)[:200]
            error = NoPermissionError if response.status in (403, 409) else DeviceError
            raise error(f"wattwise agent: {message}")
        if check is not None:
            self._check(data, url, check)
        return data

    def _check(self, data: object, url: str, check: Callable[[JsonObject], None]) -> None:
        where = f"wattwise agent at {self.path}: the answer to {url}"
        if not isinstance(data, dict):
            raise DeviceError(f"{where} is not a JSON object (an agent of another version?)")
        try:
            check(JsonObject(data, where))
        except UsageError as err:  # the codec's words for a damaged file name the field; the fix is not the file's
            raise DeviceError(f"{str(err).removesuffix(f'; {FIX}')} (an agent of another version?)") from None

    def status(self) -> AgentStatus:
        """Every GPU's settings and holder (`wattwise agent status`)."""
        return cast(AgentStatus, self.request("GET", "/v1/gpus", check=_check_status))

    def devices(self) -> DeviceList:
        """The agent's backend and each GPU's spec, which a client opens locally for reads."""
        return cast(DeviceList, self.request("GET", "/v1/devices", check=_check_device_list))

    # `gpu` below: the GPU's index on the node, or its UUID (what `AgentGPU` sends: a renumbering of the
    # node's GPUs between the lookup and the request cannot make it change another GPU).
    def set_power_limit(self, gpu: int | str, watts: float, job: str = "") -> GpuStatus:
        """Set GPU `gpu`'s power limit, taking (or keeping) this process's lease under the name `job`.

        The lease also carries this process's batch job id (`batch_job_id`).
        """
        body = PowerLimitRequest(watts=watts, job=job, job_id=batch_job_id())
        return cast(GpuStatus, self.request("POST", _gpu_url(gpu, "power_limit"), body, _check_gpu))

    def lock_sm_clocks(self, gpu: int | str, min_mhz: int, max_mhz: int, job: str = "") -> GpuStatus:
        """Lock GPU `gpu`'s SM clocks to [min_mhz, max_mhz], under this process's lease."""
        body = ClockLockRequest(min_mhz=min_mhz, max_mhz=max_mhz, job=job, job_id=batch_job_id())
        return cast(GpuStatus, self.request("POST", _gpu_url(gpu, "sm_clocks"), body, _check_gpu))

    def reset_sm_clocks(self, gpu: int | str) -> GpuStatus:
        """Unlock GPU `gpu`'s SM clocks."""
        return cast(GpuStatus, self.request("DELETE", _gpu_url(gpu, "sm_clocks"), check=_check_gpu))

    def hand_over(self, gpu: int | str, pid: int) -> GpuStatus:
        """Make this process's child `pid` the holder of GPU `gpu`.

        The GPU stays capped for as long as the child lives, or another process of its process group when
        the group is the command's own (see the agent's `hand_over`).
        """
        return cast(GpuStatus, self.request("POST", _gpu_url(gpu, "holder"), HandOverRequest(pid=pid), _check_gpu))

    def release(self, gpu: int | str) -> GpuRelease:
        """Give GPU `gpu` back: the agent restores its original settings and shows no holder.

        Returns:
            The GPU's status, with `released`: "restored", "not held" (restored already), "kept" (held
            on by the process group of the command this process handed the lease to) or "failed" (the
            GPU refused its originals; still held).
        """
        return cast(GpuRelease, self.request("POST", _gpu_url(gpu, "release"), check=_check_release))

    def register_job(self, job_id: str, uid: int, gpus: list[int | str]) -> JobAllocationInfo:
        """Tell the agent that the scheduler gave batch job `job_id` of user `uid` the GPUs `gpus` (root).

        From then on that user may change only the GPUs of their registered jobs.
        """
        body = JobRegistration(job_id=job_id, uid=uid, gpus=gpus)
        return cast(JobAllocationInfo, self.request("POST", "/v1/jobs", body, _check_allocation))

    def end_job(self, job_id: str) -> JobEnd:
        """Forget batch job `job_id`'s registration (root: the SLURM epilog's last step)."""
        url = f"/v1/jobs/{urllib.parse.quote(job_id, safe='')}"
        return cast(JobEnd, self.request("DELETE", url, check=_check_job_end))

    def release_job(self, job_id: str) -> JobRelease:
        """Restore every GPU held under batch job `job_id` (root, or the job's user for their own leases)."""
        body = JobReleaseRequest(job_id=job_id)
        return cast(JobRelease, self.request("POST", "/v1/release", body, _check_job_release))


class AgentGPU(Device):
    """A GPU read locally and changed through the agent."""

    backend = "agent"

    def __init__(self, local: Device, client: AgentClient, *, job: str = "", uuid: str = "") -> None:
        self.local = local
        self.client = client
        self.job = job
        #: The UUID the agent shows for this GPU (`gpu_uuid`); "" when not known (an old spec).
        self.uuid = uuid
        #: The admin's bounds for this GPU as the agent shows them, once asked (`power_limit_range`).
        self._allowed_w: tuple[float, float] | None = None
        self.simulated = local.simulated
        #: The power limit this process last set through the agent (None: none, or given back).
        self.requested_limit_w: float | None = None
        #: Said once when someone else lifted that limit (see `settings_lifted`); None until then.
        self.lifted_note: str | None = None
        #: When `settings_lifted` last found the requested limit in force (monotonic s; None: not since it was
        #: set). A release within `LIFT_CHECK_FRESH_S` of it skips its own check: a run and `wattwise cap`
        #: check at their end, just before they release.
        self._limit_checked_at: float | None = None
        #: What the last `release` did (the agent's `released`: "restored", "not held", "kept"), and the
        #: holder the GPU had after it; None before a release, or when it failed.
        self.release_outcome: str | None = None
        self.holder_after_release: HolderInfo | None = None
        #: The child this process handed its lease to (`hand_over`), None when it kept it.
        self.handed_to: int | None = None

    @property
    def _ref(self) -> int | str:
        """How this GPU is named to the agent: its UUID when known (stable whatever the numbering), else its index."""
        return self.uuid or self.index

    @property
    def index(self) -> int:
        return self.local.index

    @property
    def name(self) -> str:
        return self.local.name

    @property
    def driven(self) -> bool:
        return self.local.driven

    def has_energy_counter(self) -> bool:
        return self.local.has_energy_counter()

    def energy_j(self) -> float:
        return self.local.energy_j()

    @property
    def energy_update_period_s(self) -> float:
        return self.local.energy_update_period_s

    @property
    def max_read_interval_s(self) -> float | None:
        return self.local.max_read_interval_s

    def power_w(self) -> float:
        return self.local.power_w()

    def power_limit_w(self) -> float:
        return self.local.power_limit_w()

    def power_limit_range(self) -> PowerLimitRange:
        """The limits this job may set: the GPU's own range narrowed to the admin's bounds.

        The agent refuses a limit outside the `allowed_power_limit_w` its status shows for this GPU (an
        admin's floor and ceiling for the model), so tuning and capping see that range, not the GPU's own:
        with a 280 W ceiling on a 300 W GPU, tuning profiles limits up to 280 W. The default stays the
        GPU's own. Asked once; an agent that shows no bounds leaves the GPU's own range.
        """
        own = self.local.power_limit_range()
        if self._allowed_w is None:
            self._allowed_w = self._agent_allowed_w()
        if self._allowed_w is None:
            return own
        low_w, high_w = self._allowed_w
        return PowerLimitRange(min_w=max(own.min_w, low_w), max_w=min(own.max_w, high_w), default_w=own.default_w)

    def _agent_allowed_w(self) -> tuple[float, float] | None:
        status = self._agent_status()
        bounds = status.get("allowed_power_limit_w") if status is not None else None
        if bounds is not None and len(bounds) == 2:
            return float(bounds[0]), float(bounds[1])
        return None

    def _agent_status(self) -> GpuStatus | None:
        """This GPU's entry in the agent's status (found by UUID when known); None when it shows none."""
        for gpu in self.client.status().get("gpus", []):
            if (gpu.get("uuid") == self.uuid) if self.uuid else (gpu.get("index") == self.index):
                return gpu
        return None

    def _still_handed(self) -> bool:
        """The child this process handed the lease to still holds this GPU (False when the agent cannot say)."""
        try:
            status = self._agent_status()
        except DeviceError:
            return False
        holder = status.get("holder") if status is not None else None
        return holder is not None and holder.get("pid") == self.handed_to

    def supported_sm_clocks_mhz(self) -> list[int]:
        return self.local.supported_sm_clocks_mhz()

    def locked_sm_clocks_mhz(self) -> tuple[int, int] | None:
        return self.local.locked_sm_clocks_mhz()

    def set_power_limit_w(self, watts: float) -> None:
        self.client.set_power_limit(self._ref, float(watts), self.job)
        self.requested_limit_w = float(watts)
        self._limit_checked_at = None

    def hand_over(self, pid: int) -> None:
        """Make this process's child `pid` the holder of this GPU's lease (see `AgentClient.hand_over`).

        The agent then keeps the settings for as long as the child lives, even when this process is killed;
        this process may still `release` the GPU.

        Raises:
            DeviceError: The agent refused (this process holds no lease, `pid` is not its child) or is older
                than this client.
        """
        holder = self.client.hand_over(self._ref, pid).get("holder")
        # The agent names the holder by its own pid: in a container, not the number this process knows.
        handed = holder.get("pid") if holder is not None else None
        self.handed_to = handed if handed is not None else pid

    def lock_sm_clocks_mhz(self, min_mhz: int, max_mhz: int) -> None:
        self.client.lock_sm_clocks(self._ref, int(min_mhz), int(max_mhz), self.job)

    def reset_sm_clocks(self) -> None:
        self.client.reset_sm_clocks(self._ref)

    @property
    def settings_lease(self) -> str:
        """The agent's lease of this GPU for this process: its socket and the GPU's index."""
        return f"{self.client.path}#{self.index}"

    def release(self) -> None:
        """Give the GPU back now: the agent restores its original settings.

        A limit someone else lifted meanwhile is noted first (`settings_lifted`), for whoever reports it,
        unless a check found it in force just before (the run's or `wattwise cap`'s own, at its end).
        What the agent did is kept in `release_outcome` (and `holder_after_release`): `wattwise cap` tells it.

        Raises:
            DeviceError: The agent could not be reached, or the GPU refused its original settings.
        """
        checked_at = self._limit_checked_at
        if checked_at is None or time.monotonic() - checked_at > LIFT_CHECK_FRESH_S:
            self.settings_lifted()
        self.release_outcome = self.holder_after_release = None
        answer = self.client.release(self._ref)
        self.release_outcome = str(answer.get("released", ReleaseOutcome.RESTORED))
        self.holder_after_release = answer.get("holder")
        if self.release_outcome == ReleaseOutcome.FAILED:
            raise DeviceError(
                f"wattwise agent: GPU {self.index} refused its original settings; it stays held (see the agent's log)"
            )
        self.requested_limit_w = None

    def settings_lifted(self) -> str | None:
        """Whether the power limit this process set through the agent is still in force; a note if not.

        Someone else may lift it: the agent going away without a journal to come back to, an admin's
        `wattwise restore` or `nvidia-smi -pl` (an agent restart keeps a live holder's limit). The run then
        goes on uncapped, and says so once, in its summary's notes too (`Device.settings_lifted`; `wattwise
        cap` prints it): the first call that finds the GPU's limit more than 0.5 W away from the one set
        keeps the note in `lifted_note`, which later calls return.

        Returns:
            The note (one line naming the GPU, both limits and what to check), or None while the limit holds.
        """
        if self.lifted_note is not None or self.requested_limit_w is None:
            return self.lifted_note
        if self.handed_to is not None and not self._still_handed():
            self._limit_checked_at = time.monotonic()
            return None  # the command's lease ended: the agent restored the GPU, as it should
        try:
            now_w = self.local.power_limit_w()
        except DeviceError:
            return None
        if abs(now_w - self.requested_limit_w) <= 0.5:
            self._limit_checked_at = time.monotonic()
            return None
        self.lifted_note = (
            f"GPU {self.index}: its power limit is {now_w:g} W, not the {self.requested_limit_w:g} W "
            "this job set through the node agent: someone else changed it (the agent restored it "
            "or an admin set another limit); the rest of the run is not capped as asked "
            "(see `wattwise agent status` and the agent's audit log)"
        )
        return self.lifted_note

    def name_job(self, job: str) -> None:
        """Name the job the agent shows as this GPU's holder (and labels its Prometheus series with).

        Unprintable characters become "?", and at most `MAX_JOB_CHARS` characters are kept.
        """
        self.job = "".join(c if c.isprintable() else "?" for c in job)[:MAX_JOB_CHARS]

    @property
    def simulation(self) -> Simulation | None:
        """The local simulated GPU, which shares the agent's settings; None for a real GPU."""
        return self.local.simulation

    def spec(self) -> DeviceSpec:
        return {
            "backend": "agent",
            "index": self.index,
            "uuid": self.uuid,
            "socket": self.client.path,
            "local": self.local.spec(),
        }

    def describe(self) -> DeviceDescription:
        info = self.local.describe()
        info["backend"] = "agent"
        info["agent_socket"] = self.client.path
        return info


def gpu_uuid(spec: DeviceSpec) -> str:
    """The UUID that names an agent's GPU for every process on the node, from its `Device.spec()`.

    NVML's `GPU-...` UUID where the spec has one; a simulated GPU gets a stable `GPU-...` UUID derived from
    its state file (or its index), so `CUDA_VISIBLE_DEVICES=GPU-<uuid>` names it as it would a real one.

    Args:
        spec: The GPU's spec, as the agent's `GET /v1/devices` lists it.

    Returns:
        The UUID, "GPU-" and 36 characters.
    """
    found = spec.get("uuid")
    if isinstance(found, str) and found:
        return found
    key = spec.get("state_file") or f"index {spec.get('index')}"
    return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'wattwise-simulated:{key}')}"


def job_gpu_specs(
    specs: list[DeviceSpec], cuda_visible_devices: str | None, mig_parent: Callable[[str], str | None] | None = None
) -> list[DeviceSpec]:
    """The agent's GPUs this job sees, in the order CUDA numbers them for it (`torch.cuda` device k).

    The same rules as the NVML backend (`wattwise.devices.nvml.visible_nvml_indices`): unset shows every
    GPU; entries are the node's indices or (prefixes of) `GPU-<uuid>`; the list ends at the first entry
    that names no GPU or repeats one. A MIG instance (`MIG-<uuid>`) stands for the GPU it lives on (the
    agent changes whole GPUs); two instances of one GPU are that GPU once.

    Args:
        specs: The agent's GPUs' specs, in the agent's (node) order.
        cuda_visible_devices: `CUDA_VISIBLE_DEVICES`, or None when unset.
        mig_parent: Maps a MIG instance's UUID to its GPU's; None: NVML's answer (`mig_parent_uuid`).

    Returns:
        The specs of the job's GPUs: entry k is the GPU rank k with local rank k trains on.

    """
    from wattwise.devices.nvml import mig_parent_uuid, visible_nvml_indices

    visible = visible_nvml_indices(
        cuda_visible_devices, [gpu_uuid(s) for s in specs], mig_parent=mig_parent or mig_parent_uuid
    )
    return [specs[position] for position in visible]


def agent_gpus(
    indices: list[int] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    job: str = "",
    base_step_time_s: float = 0.02,
) -> list[AgentGPU]:
    """The agent's GPUs this job sees (`CUDA_VISIBLE_DEVICES`), each opened locally for reads.

    A job leases and changes only the GPUs CUDA shows it: with `CUDA_VISIBLE_DEVICES=2`, its GPU 0 is the
    node's GPU 2, and that is the only one it may change (see `job_gpu_specs`). Each `AgentGPU` keeps the
    node's index (`index`) and UUID (`uuid`), by which the agent knows it.

    Args:
        indices: The GPUs to use, numbered as the job sees them (after `CUDA_VISIBLE_DEVICES`, as
            `torch.cuda` numbers them); None: every GPU the job sees.
        path: The agent's socket; None: `$WATTWISE_AGENT_SOCKET`, else the default.
        job: The job name the agent shows for the holder.
        base_step_time_s: A simulated GPU's step time at full power, for the emulated workload this
            process drives on it.

    Raises:
        DeviceError: No agent answers, or the job sees no GPU at one of `indices`.
    """
    client = AgentClient(path)
    specs = sorted(client.devices().get("devices", []), key=lambda s: s["index"])
    seen = job_gpu_specs(specs, os.environ.get("CUDA_VISIBLE_DEVICES"))
    wanted = indices if indices is not None else list(range(len(seen)))
    missing = [i for i in wanted if not 0 <= i < len(seen)]
    if missing:
        shown = [s["index"] for s in seen]
        raise DeviceError(
            f"this job sees no GPU {missing} through the wattwise agent at {client.path}: it sees "
            f"{len(seen)} GPU(s), the node's {shown} (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}); number GPUs as the job sees them"
        )
    return [AgentGPU(_local(seen[i], base_step_time_s), client, job=job, uuid=gpu_uuid(seen[i])) for i in wanted]


def discover_gpus(wanted: Wanted) -> list[AgentGPU]:
    """The registry's discover function: the agent's GPUs at `wanted.gpu_indices`, at the default socket."""
    return agent_gpus(wanted.gpu_indices, base_step_time_s=wanted.base_step_time_s)


def _local(spec: DeviceSpec, base_step_time_s: float = 0.02) -> Device:
    """This process's own view of an agent's GPU.

    A simulated one is the process's shared object for its state file, so the emulated workload and the
    energy monitor see one counter (as `discover` gives).
    """
    from wattwise.devices import open_spec, simulated_gpus
    from wattwise.devices.simulated import load_file_of

    if spec.get("backend") == "simulated" and spec.get("state_file"):
        state_file = Path(str(spec["state_file"]))
        index = int(spec["index"])
        if state_file.name == f"gpu{index}.json":
            gpu = simulated_gpus(1, persist_dir=state_file.parent, indices=[index], base_step_time_s=base_step_time_s)[
                0
            ]
            gpu.publish_load(load_file_of(state_file))  # the agent counts the load this process drives
            return gpu
    return open_spec(spec)


def open_agent_spec(spec: DeviceSpec) -> AgentGPU:
    """Reopen an `AgentGPU` from its `spec()`."""
    return AgentGPU(_local(spec["local"]), AgentClient(spec.get("socket")), uuid=str(spec.get("uuid") or ""))


#: CAP_SYS_ADMIN, the capability NVML asks for to set power limits and clocks.
_CAP_SYS_ADMIN = 21


def claim_auto() -> str | None:
    """Backend "auto" takes the agent, with this note, when `agent_preferred()`; else None."""
    if not agent_preferred():
        return None
    return f"using the node agent at {socket_path()}: this process may not change GPU settings itself (backend agent)"


def agent_preferred(path: str | os.PathLike[str] | None = None) -> bool:
    """The `auto` rule: the agent's socket exists and this process may not change GPU settings itself.

    It may not when it is neither root nor holds CAP_SYS_ADMIN.
    """
    return os.path.exists(socket_path(path)) and not _may_change_settings()


def _may_change_settings() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False
