"""The agent's HTTP API (aiohttp): its routes, the parsing of each request, and the statuses of refusals.

Routes (JSON in and out; errors are `{"error": "one line"}`):

- `GET  /v1/gpus`: per GPU, the index, name, current and default power limit, locked clocks, holder;
- `GET  /v1/devices`: the backend and each GPU's `spec` (clients open the same GPU locally for reads);
- `POST /v1/gpus/{index}/power_limit` `{"watts": W, "job": "name"}`;
- `POST /v1/gpus/{index}/sm_clocks` `{"min_mhz": F, "max_mhz": F, "job": "name"}`;
- `DELETE /v1/gpus/{index}/sm_clocks`: unlock the clocks (the original stays recorded);
- `POST /v1/gpus/{index}/release`: the holder gives the GPU back, its original settings restored.
- `POST /v1/gpus/{index}/holder` `{"pid": P}`: the holder makes its child P the holder (`wattwise cap`);
- `POST /v1/release` `{"job_id": "J"}`: every GPU held under batch job J is restored (root or J's user).
- `POST /v1/jobs` `{"job_id": "J", "uid": U, "gpus": [index or uuid]}`: root records the GPUs the scheduler
  gave job J of user U (the SLURM prolog); that user may then change only the GPUs of their jobs;
- `DELETE /v1/jobs/{job_id}`: root forgets job J's registration (the SLURM epilog).

`{index}` is a GPU's index (ASCII digits) or its UUID (as the status shows it). The caller is who the
kernel says it is (SO_PEERCRED on the connection), never what the body claims.

Each body is read by the record codec (`wattwise.codec`) into its wire TypedDict
(`wattwise.devices.agent`: the very shape the client sends), from the definitions below
(`define_foreign`): one reader checks every file wattwise reads and every wire body, with the same rules
(a bool is not a number, a number is finite, a name is printable) and the same one-line refusal, which
names the field and ends with what to send instead (`SEND`), so no handler checks a value by hand. A job
name the body leaves out reads as ""; what only the agent can judge (a GPU's range, its holder, whether
a named GPU exists: 404) is checked after, by the agent.
Answers: 400 malformed or out of the GPU's range, 403 not allowed (or outside the admin's bounds), 404 no
such GPU, 409 held by another process, 413 body too large (refused before it is read), 429 the caller's
user has as many cgroup checks in progress as it may, 500 the device or the agent failed: each
refusal of `wattwise.agent.agent` has its status in `STATUS_OF`, the one place that maps them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

from aiohttp import web
from aiohttp.typedefs import Middleware

from wattwise.agent import MAX_JOB_CHARS, is_job_name
from wattwise.agent.agent import (
    Agent,
    AgentCounts,
    AgentFault,
    AgentRefusal,
    Busy,
    Conflict,
    InvalidRequest,
    NoSuchGPU,
    NotAllowed,
)
from wattwise.agent.connections import ConnectionLimits
from wattwise.agent.jobs import JobName
from wattwise.agent.leases import Holder
from wattwise.agent.processes import Peer, identify_peer, process_alive, process_groups
from wattwise.codec import Codec, FieldSpec, JsonObject, Number, Whole, define_foreign, from_json
from wattwise.devices.agent import (
    ClockLockRequest,
    GpuStatus,
    HandOverRequest,
    JobEnd,
    JobRegistration,
    JobReleaseRequest,
    PowerLimitRequest,
    RequestBody,
)
from wattwise.errors import UsageError

log = logging.getLogger(__name__)

#: Requests are a few dozen bytes: anything larger is refused before it is read.
MAX_BODY_BYTES = 64 * 1024
#: Seconds a request's body may take to arrive once its header has (a client sends it at once).
BODY_DEADLINE_S = 1.0
#: Where the app finds the connections' peers, pinned at accept (`ConnectionLimits.peer_of`).
LIMITS_KEY = web.AppKey("limits", ConnectionLimits)

#: The HTTP status of each kind of refusal.
STATUS_OF: dict[type[AgentRefusal], int] = {
    InvalidRequest: 400,
    NotAllowed: 403,
    NoSuchGPU: 404,
    Conflict: 409,
    Busy: 429,
    AgentFault: 500,
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status_of(refusal: AgentRefusal) -> int:
    """The HTTP status answering `refusal`: its kind's in `STATUS_OF` (the nearest one's for a subclass).

    A refusal of no kind there is the agent's own fault: 500.
    """
    return next((STATUS_OF[kind] for kind in type(refusal).__mro__ if kind in STATUS_OF), 500)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _errors(counts: AgentCounts) -> Middleware:
    """The middleware that answers every refusal and error as one JSON line, and counts the answers."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        answer = await _answer(request, handler)
        counts.requests += 1
        if answer.status >= 400:
            counts.refusals[answer.status] = counts.refusals.get(answer.status, 0) + 1
        return answer

    return errors


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except AgentRefusal as err:
        return _error(status_of(err), str(err))
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
    """The calling process as the kernel named it when its connection was accepted, and its groups.

    The process is the one pinned at accept (`wattwise.agent.processes.Peer`): its groups are read now,
    then the agent checks that the same process still runs under the pid, so a pid recycled since (by
    another user's process) is refused, never taken for the caller. The job name is the body's.
    """
    limits = request.app.get(LIMITS_KEY)
    peer = limits.peer_of(request.transport) if limits is not None else None
    if peer is not None:
        return _pinned(peer)
    # An app served without the agent's listener (in-process use): pinned now.
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None:
        raise InvalidRequest("connection closed")
    peer = identify_peer(sock)
    try:
        return _pinned(peer)
    finally:
        peer.close()


def _pinned(peer: Peer) -> tuple[Holder, set[int]]:
    groups = process_groups(peer.pid, peer.gid)
    if peer.start_ticks is None or not peer.same_process():
        raise InvalidRequest("the calling process is gone (or is in another PID namespace)")
    return Holder(peer.pid, peer.uid, "", peer.start_ticks), groups


async def _body(request: web.Request) -> dict[str, object]:
    """The request's JSON object as it came, unchecked: `_read` checks it, field by field, with the codec."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(MAX_BODY_BYTES, request.content_length)
    try:
        raw = await asyncio.wait_for(request.read(), BODY_DEADLINE_S)
    except TimeoutError:
        raise InvalidRequest(f"the request body did not arrive within {BODY_DEADLINE_S:g} s") from None
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("the request body is not valid JSON") from None
    except RecursionError:
        raise InvalidRequest("the request body is nested too deeply (a flat JSON object is expected)") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return data


@dataclasses.dataclass(frozen=True)
class GpuNames(Codec):
    """The GPUs a body names, each by its index or its UUID: a list, each item as text for `_gpu`.

    A string is kept as it is, anything else as JSON writes it (`3` as "3", `true` as "true"): `_gpu` reads
    an index from its digits, as from a URL's, and answers any other name with 404 (no such GPU), never
    400, as it does for a URL's.
    """

    def load(self, f: JsonObject, key: str) -> list[str] | None:
        """The names of the list at `key`; None when absent or null."""
        value = f.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            f.refuse(key, "the list of the job's GPUs on this node (indices or uuids)", value)
        return [item if isinstance(item, str) else json.dumps(item) for item in value]


# Each body as the codec reads it (`wattwise.codec`): its keys in the order they are checked, the
# first wrong one named. A job name or batch job id left out reads as "".
_NAMES = {"job": FieldSpec(JobName(), if_missing=""), "job_id": FieldSpec(JobName(), if_missing="")}
define_foreign(PowerLimitRequest, **_NAMES, watts=FieldSpec(Number(minimum=None), required=True))
define_foreign(
    ClockLockRequest,
    **_NAMES,
    min_mhz=FieldSpec(Whole(), required=True),
    max_mhz=FieldSpec(Whole(), required=True),
)
define_foreign(HandOverRequest, pid=FieldSpec(Whole(minimum=1), required=True))
define_foreign(
    JobRegistration,
    job_id=_NAMES["job_id"],
    uid=FieldSpec(Whole(), required=True),
    gpus=FieldSpec(GpuNames(), required=True),
)
define_foreign(JobReleaseRequest, job_id=_NAMES["job_id"])

#: What a refusal of each body tells the client to send instead (the codec's fix).
SEND: dict[type, str] = {
    PowerLimitRequest: 'send {"watts": W, "job": "name"}: W the power limit, a finite number of watts',
    ClockLockRequest: 'send {"min_mhz": F, "max_mhz": F, "job": "name"}: the SM clock range, in whole MHz',
    HandOverRequest: 'send {"pid": P}: P the pid of the caller\'s child, a positive integer',
    JobRegistration: (
        'send {"job_id": "J", "uid": U, "gpus": [index or uuid]}: J the batch job (its SLURM_JOB_ID), U its '
        "user's id, a non-negative integer"
    ),
    JobReleaseRequest: 'send {"job_id": "J"}: J the batch job whose GPUs to release (its SLURM_JOB_ID)',
}

B = TypeVar("B", bound=RequestBody)


async def _read(request: web.Request, kind: type[B]) -> B:
    """The request's body read as `kind` by the codec; `InvalidRequest` (400) naming the field and the fix."""
    data = await _body(request)
    try:
        return from_json(kind, JsonObject(data, "request body", fix=SEND[kind]))
    except UsageError as err:
        raise InvalidRequest(str(err)) from None


def _index(request: web.Request, agent: Agent) -> int:
    """The index of the GPU a URL names: by its index (ASCII digits only) or by its UUID.

    A client names the GPU by its UUID, so that a renumbering of the node's GPUs between its lookup and
    its request cannot make it change another GPU.
    """
    return _gpu(request.match_info["index"], agent)


def _gpu(text: str, agent: Agent) -> int:
    """The index of the GPU `text` names: its index (ASCII digits, as a URL or `GpuNames` gives it) or its UUID."""
    if text.isascii() and text.isdigit() and len(text) <= 6:  # not "²" nor "١"
        return int(text)
    if text in agent.uuids:
        return agent.uuids[text]
    raise NoSuchGPU(f"no GPU {text[:80]!r} on this node (a GPU is named by its index or its uuid)")


async def _changed(agent: Agent, index: int, caller: Holder, change: Callable[[], GpuStatus]) -> web.Response:
    """Make a change for `caller` on GPU `index` once its allocation is checked (off the event loop).

    The caller is checked again after the check, which may take seconds: a process that ended meanwhile
    (its pid perhaps another's by now) changes nothing.
    """
    await agent.check_allocation(caller, index)
    if not process_alive(caller):
        agent.forget_check(caller, index)
        raise InvalidRequest("the calling process is gone (or is in another PID namespace)")
    try:
        return web.json_response(change())
    finally:
        agent.forget_check(caller, index)


def make_app(agent: Agent, limits: ConnectionLimits | None = None) -> web.Application:
    """The aiohttp application serving `agent`; `limits`: the listener's, which knows each connection's peer."""

    async def status(request: web.Request) -> web.Response:
        return web.json_response(agent.status())

    async def devices(request: web.Request) -> web.Response:
        return web.json_response(agent.device_list())

    async def power_limit(request: web.Request) -> web.Response:
        index = _index(request, agent)
        asked = await _read(request, PowerLimitRequest)
        caller, gids = _caller(request)
        holder = Holder(caller.pid, caller.uid, asked["job"], caller.start_ticks, asked["job_id"])
        return await _changed(agent, index, holder, lambda: agent.set_power_limit(index, holder, gids, asked["watts"]))

    async def lock_clocks(request: web.Request) -> web.Response:
        index = _index(request, agent)
        asked = await _read(request, ClockLockRequest)
        caller, gids = _caller(request)
        holder = Holder(caller.pid, caller.uid, asked["job"], caller.start_ticks, asked["job_id"])
        low, high = asked["min_mhz"], asked["max_mhz"]
        return await _changed(agent, index, holder, lambda: agent.lock_sm_clocks(index, holder, gids, low, high))

    async def reset_clocks(request: web.Request) -> web.Response:
        index = _index(request, agent)
        caller, gids = _caller(request)
        return await _changed(agent, index, caller, lambda: agent.reset_sm_clocks(index, caller, gids))

    async def release(request: web.Request) -> web.Response:
        index = _index(request, agent)
        caller, _ = _caller(request)
        return web.json_response(agent.release(index, caller))

    async def hand_over(request: web.Request) -> web.Response:
        index = _index(request, agent)
        asked = await _read(request, HandOverRequest)
        caller, _ = _caller(request)
        return web.json_response(agent.hand_over(index, caller, asked["pid"]))

    async def release_job(request: web.Request) -> web.Response:
        job_id = (await _read(request, JobReleaseRequest))["job_id"]
        if not job_id:
            raise InvalidRequest("job_id must name the batch job whose GPUs to release (its SLURM_JOB_ID)")
        caller, _ = _caller(request)
        return web.json_response(agent.release_job(job_id, caller))

    async def register_job(request: web.Request) -> web.Response:
        asked = await _read(request, JobRegistration)
        job_id, gpus = asked["job_id"], cast(list[str], asked["gpus"])  # as `GpuNames` reads them
        if not job_id:
            raise InvalidRequest("job_id must name the batch job (its SLURM_JOB_ID)")
        if len(gpus) > len(agent.devices):
            raise InvalidRequest("gpus must be the list of the job's GPUs on this node (indices or uuids)")
        caller, _ = _caller(request)
        return web.json_response(agent.register_job(job_id, asked["uid"], [_gpu(g, agent) for g in gpus], caller))

    async def end_job(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        if not is_job_name(job_id):
            raise InvalidRequest(f"job_id must be a printable string of at most {MAX_JOB_CHARS} characters")
        caller, _ = _caller(request)
        return web.json_response(JobEnd(job_id=job_id, ended=agent.end_job(job_id, caller)))

    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_errors(agent.counts)])
    if limits is not None:
        app[LIMITS_KEY] = limits
    app.router.add_post("/v1/jobs", register_job)
    app.router.add_delete("/v1/jobs/{job_id}", end_job)
    app.router.add_get("/v1/gpus", status)
    app.router.add_get("/v1/devices", devices)
    app.router.add_post("/v1/gpus/{index}/power_limit", power_limit)
    app.router.add_post("/v1/gpus/{index}/sm_clocks", lock_clocks)
    app.router.add_delete("/v1/gpus/{index}/sm_clocks", reset_clocks)
    app.router.add_post("/v1/gpus/{index}/release", release)
    app.router.add_post("/v1/gpus/{index}/holder", hand_over)
    app.router.add_post("/v1/release", release_job)
    return app
