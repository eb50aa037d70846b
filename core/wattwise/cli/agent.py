"""`wattwise agent serve|status|release`: the node agent that lets users who are not root change GPU settings."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from wattwise.agent import DEFAULT_SOCKET, DEFAULT_STATE_DIR, SOCKET_ENV
from wattwise.cli.main import add_command
from wattwise.devices import journalled_backends
from wattwise.errors import UsageError

if TYPE_CHECKING:
    from wattwise.devices.agent import AgentClient

T = TypeVar("T")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise agent` command to the `wattwise` parser."""
    p = add_command(sub, "agent")
    p.set_defaults(func=_no_subcommand)
    agent_sub = p.add_subparsers(dest="agent_command", metavar="SUBCOMMAND")

    serve = agent_sub.add_parser(
        "serve",
        help="serve the agent's API on a Unix socket (as root)",
        description="Serve the agent's HTTP API on a Unix socket until SIGTERM or SIGINT, then restore the GPUs "
        "whose holders ended (a live holder keeps its lease for the next start). SIGHUP reads --config again.",
    )
    serve.add_argument("--socket", default=DEFAULT_SOCKET, help="the Unix socket (default %(default)s)")
    # The backends whose settings are changed in the process itself, and journalled: the agent is that process.
    serve.add_argument(
        "--backend",
        choices=journalled_backends(),
        default="nvml",
        help=f"GPUs to serve: {', '.join(journalled_backends())} (simulated: for tests and the "
        "demo) (default %(default)s)",
    )
    serve.add_argument(
        "--group", help="the socket is mode 0660 and owned by this group, a name or a gid (default: the agent's group)"
    )
    serve.add_argument("--config", help="YAML: allowed users/groups, power-limit floors and ceilings, clock range")
    serve.add_argument(
        "--state-dir", default=DEFAULT_STATE_DIR, help="the agent's journal folder, 0700 (default %(default)s)"
    )
    serve.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    serve.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics port (default %(default)s)")
    serve.add_argument("--simulated-gpus", type=int, default=1, help="backend simulated: how many GPUs (default 1)")
    serve.add_argument(
        "--simulated-dir",
        help="backend simulated: the GPUs' shared state folder, readable by clients "
        "(default: `simulated` beside the socket)",
    )
    serve.set_defaults(func=run_serve)

    status = agent_sub.add_parser(
        "status",
        help="show each GPU's limits and holder",
        description="Per GPU: index, name, current and default power limit, locked clocks and the holder.",
    )
    _socket(status)
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=run_status)

    release = agent_sub.add_parser(
        "release",
        help="restore every GPU a batch job holds (root: a SLURM epilog)",
        description="Restore every GPU held under the batch job JOBID (the SLURM_JOB_ID "
        "its clients sent when they leased) and drop the leases, whatever "
        "process holds them. Root may release any job, a user their own.",
    )
    _job_and_socket(release)
    release.add_argument("--json", action="store_true", help="print the agent's answer as JSON")
    release.set_defaults(func=run_release)

    register = agent_sub.add_parser(
        "register-job",
        help="record the GPUs a batch job was given (root: a SLURM prolog)",
        description="Record that the scheduler gave batch job JOBID of user UID these GPUs. From then on "
        "that user may change only the GPUs of their registered jobs; `end-job` forgets it.",
    )
    register.add_argument("--job", required=True, metavar="JOBID", help="the batch job's id (SLURM_JOB_ID)")
    register.add_argument("--uid", required=True, type=_uid, help="the job's user id (SLURM_JOB_UID)")
    register.add_argument(
        "--gpus",
        required=True,
        type=_gpu_list,
        help="the job's GPUs on this node, comma-separated indices or UUIDs (SLURM_JOB_GPUS)",
    )
    _socket(register)
    register.set_defaults(func=run_register_job)

    end = agent_sub.add_parser(
        "end-job",
        help="forget a batch job's registration (root: a SLURM epilog)",
        description="Forget the GPUs registered for batch job JOBID (its leases are released by `release`). "
        "When the agent does not answer and --state-dir is given, the job's end is recorded there and the "
        "agent ends the registration when it reads it (at its next start, or before its next decision).",
    )
    _job_and_socket(end)
    end.add_argument(
        "--state-dir",
        help="the agent's --state-dir: where to record the job's end when the agent does not answer (root)",
    )
    end.set_defaults(func=run_end_job)


def _job_and_socket(parser: argparse.ArgumentParser) -> None:
    """Add `--job JOBID` (required) and `--socket`, the options of an action on one batch job."""
    parser.add_argument("--job", required=True, metavar="JOBID", help="the batch job's id (SLURM_JOB_ID)")
    _socket(parser)


def _socket(parser: argparse.ArgumentParser) -> None:
    """Add `--socket`, the option of every action that asks the agent (`serve`'s own has a default)."""
    parser.add_argument("--socket", help=f"the agent's socket (default ${SOCKET_ENV}, else {DEFAULT_SOCKET})")


def _uid(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise argparse.ArgumentTypeError(f"must be a user id, a non-negative integer (got {text!r})")
    return int(text)


def _gpu_list(text: str) -> list[int | str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or len(parts) > 64:
        raise argparse.ArgumentTypeError(f"must list the job's GPUs, comma-separated (got {text!r})")
    out: list[int | str] = []
    for part in parts:
        if part.isascii() and part.isdigit() and len(part) <= 6:
            out.append(int(part))
        elif part.startswith("GPU-") and part.isascii() and part.isprintable() and len(part) <= 64:
            out.append(part)
        else:
            raise argparse.ArgumentTypeError(f"{part!r} is neither a GPU index nor a GPU UUID")
    return out


def _ask(socket: str | None, action: str, call: Callable[[AgentClient], T]) -> T | None:
    """`call` on a client of the agent at `socket`: its answer; None when the agent refused or did not answer.

    The refusal is one line on stderr, naming `wattwise agent ACTION`.
    """
    from wattwise.devices.agent import AgentClient
    from wattwise.devices.base import DeviceError

    try:
        return call(AgentClient(socket))
    except DeviceError as err:
        print(f"wattwise agent {action}: error: {err}", file=sys.stderr)
        return None


def run_register_job(args: argparse.Namespace) -> int:
    """Run `wattwise agent register-job` with its parsed arguments.

    Returns:
        0 when the agent recorded the job, 1 when it refused or does not answer.
    """
    answer = _ask(args.socket, "register-job", lambda client: client.register_job(args.job, args.uid, args.gpus))
    if answer is None:
        return 1
    print(
        f"wattwise agent register-job: job {answer['job_id']} of uid {answer['uid']}: GPU(s) {answer['gpus']}",
        file=sys.stderr,
    )
    return 0


def run_end_job(args: argparse.Namespace) -> int:
    """Run `wattwise agent end-job` with its parsed arguments.

    Returns:
        0 when the job is no longer registered (or never was), or its end is recorded for the agent to
        read; 1 when the agent refused, or does not answer and the end cannot be recorded.
    """
    from wattwise.devices.agent import AgentClient, AgentUnreachable
    from wattwise.devices.base import DeviceError

    try:
        answer = AgentClient(args.socket).end_job(args.job)
    except AgentUnreachable as err:
        if args.state_dir is None:
            print(f"wattwise agent end-job: error: {err}", file=sys.stderr)
            return 1
        from wattwise.agent.jobs import record_ended

        try:
            path = record_ended(Path(args.state_dir), args.job)
        except OSError as write_err:
            print(
                f"wattwise agent end-job: error: {err}; and the job's end cannot be recorded in "
                f"{args.state_dir} ({write_err.strerror or write_err}): run it as root",
                file=sys.stderr,
            )
            return 1
        print(
            f"wattwise agent end-job: job {args.job}: the agent does not answer ({err}); its end is recorded in "
            f"{path}, which the agent reads",
            file=sys.stderr,
        )
        return 0
    except DeviceError as err:
        print(f"wattwise agent end-job: error: {err}", file=sys.stderr)
        return 1
    ended = answer.get("ended")
    print(f"wattwise agent end-job: job {args.job}: " + ("ended" if ended else "was not registered"), file=sys.stderr)
    return 0


def _no_subcommand(args: argparse.Namespace) -> int:
    raise UsageError(
        "choose `wattwise agent serve`, `status`, `release`, `register-job` or `end-job` (`wattwise agent --help`)"
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run `wattwise agent serve` with its parsed arguments.

    Returns:
        The exit status.
    """
    from wattwise.extras import require

    # The server and its metrics are the `agent` extra's: without it, one line naming the extra.
    require("aiohttp", "`wattwise agent serve`")
    if args.metrics_port is not None:
        require("prometheus_client", "`wattwise agent serve --metrics-port`")
    from wattwise.agent.agent import Agent
    from wattwise.agent.audit import AuditLog
    from wattwise.agent.config import load_config
    from wattwise.agent.journal import AgentJournal
    from wattwise.agent.serve import ServeOptions, group_id, serve, share_simulated_load
    from wattwise.devices import discover

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.metrics_port is not None and not 0 < args.metrics_port < 65536:
        raise UsageError(f"--metrics-port must be between 1 and 65535 (got {args.metrics_port})")
    config = load_config(args.config)
    journal = AgentJournal(args.state_dir)
    journal.prepare()
    if args.backend == "simulated":
        os.umask(os.umask(0) & 0o022)  # its GPUs' state files are the clients' to read (systemd's UMask=0077)
        folder = Path(args.simulated_dir or Path(args.socket).parent / "simulated")
        if not folder.exists():  # the clients read the GPUs' state there
            folder.mkdir(parents=True, mode=0o755)
        found = discover("simulated", num_simulated=args.simulated_gpus, persist_dir=folder)
        share_simulated_load(found.gpus, group_id(args.group))
    else:
        found = discover(args.backend)
    agent = Agent(found.gpus, args.backend, config, journal, AuditLog(args.state_dir))
    for line in agent.recover():
        print(f"wattwise agent: restored after a crash: {line}", file=sys.stderr)
    options = ServeOptions(args.socket, args.state_dir, args.group, args.metrics_port, args.metrics_host, args.config)

    def ready() -> None:
        print(
            f"wattwise agent: serving {len(agent.devices)} GPU(s) ({args.backend}) on {args.socket} "
            f"(pid {os.getpid()})",
            file=sys.stderr,
            flush=True,
        )

    asyncio.run(serve(agent, options, ready))
    return 0


def run_status(args: argparse.Namespace) -> int:
    """Run `wattwise agent status` with its parsed arguments.

    Returns:
        The exit status.
    """
    status = _ask(args.socket, "status", lambda client: client.status())
    if status is None:
        return 1
    gpus = [_public(g) for g in status.get("gpus", [])]
    jobs, allocation = status.get("jobs", []), status.get("allocation")
    if args.json:
        print(json.dumps({"gpus": gpus, "jobs": jobs, "allocation": allocation}, indent=2))
        return 0
    for g in gpus:
        clocks = g["locked_sm_clocks_mhz"]
        holder = g["holder"]
        who = "free"
        if holder:
            named = (("job_id", "batch job"), ("pgid", "process group"))
            more = "".join(f", {what} {holder[key]}" for key, what in named if holder.get(key))
            who = f"held by pid {holder['pid']} (uid {holder['uid']}, job {holder['job']!r}{more})"
        allowed = g.get("allowed_power_limit_w")
        bounds = f", allowed {_w(allowed[0])}-{_w(allowed[1])}" if isinstance(allowed, list) and allowed else ""
        print(
            f"GPU {g['index']} {g['name']} {g.get('uuid')}: power limit {_w(g['power_limit_w'])} "
            f"(default {_w(g['default_power_limit_w'])}{bounds}), SM clocks "
            f"{f'locked {clocks[0]}-{clocks[1]} MHz' if clocks else 'unlocked'}, {who}"
        )
    registered = "; ".join(f"job {j['job_id']} of uid {j['uid']}: GPU(s) {j['gpus']}" for j in jobs) or "none"
    print(f"allocation policy {allocation}; jobs registered: {registered}")
    return 0


def run_release(args: argparse.Namespace) -> int:
    """Run `wattwise agent release --job JOBID` with its parsed arguments.

    Returns:
        0 when the job holds no GPU any more (or held none), 1 when the agent refused or a GPU stays held.
    """
    answer = _ask(args.socket, "release", lambda client: client.release_job(args.job))
    if answer is None:
        return 1
    left = [g["index"] for g in answer.get("gpus", []) if g.get("holder")]
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        released = answer.get("released", [])
        print(
            f"wattwise agent release: job {args.job}: "
            + (f"restored GPU(s) {released}" if released else "held no GPU"),
            file=sys.stderr,
        )
    others = answer.get("held_by_others") or []
    if others and not args.json:
        print(
            f"wattwise agent release: job {args.job}: GPU(s) {others} are held under this job id by another "
            "user's process, not yours: kept (only root or that user may release them)",
            file=sys.stderr,
        )
    if left:
        print(
            f"wattwise agent release: error: GPU(s) {left} of job {args.job} could not be restored (see the "
            "agent's log)",
            file=sys.stderr,
        )
        return 1
    return 0


def _public(gpu: Mapping[str, object]) -> dict[str, Any]:
    """The fields of a GPU's status that `wattwise agent status` shows."""
    keys = (
        "index",
        "uuid",
        "name",
        "power_limit_w",
        "default_power_limit_w",
        "allowed_power_limit_w",
        "locked_sm_clocks_mhz",
        "holder",
    )
    return {k: gpu.get(k) for k in keys}


def _w(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g} W"
