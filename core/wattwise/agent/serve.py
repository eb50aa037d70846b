"""`wattwise agent serve`: the agent's Unix socket made, checked and shared, and the agent served on it.

The socket's folder must be trusted (`socket_folder_problem`), the socket is bound with no moment where
others could connect, then given to the `--group` (0660) through the very node that was bound; the agent
serves until SIGTERM or SIGINT, then restores the GPUs whose holders ended and removes its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aiohttp import web

from wattwise.agent.agent import Agent
from wattwise.agent.config import AgentConfig, load_config
from wattwise.agent.connections import ConnectionLimits, Listener, quiet_client_logs, raise_open_file_limit
from wattwise.agent.http import make_app
from wattwise.agent.processes import Peer, identify_peer
from wattwise.devices.base import Device
from wattwise.errors import UsageError
from wattwise.safe_files import private_folder_problem
from wattwise.vocabulary import AllocationPolicy

#: Connections the kernel queues before the agent accepts them (the kernel caps it at net.core.somaxconn):
#: deep enough that one user connecting in a loop leaves room for the others, who retry while it is full.
LISTEN_BACKLOG = 4096
#: The largest group id (2^32 - 2: 2^32 - 1 is "no change" to chown).
MAX_GID = 2**32 - 2

log = logging.getLogger(__name__)


@dataclass
class ServeOptions:
    """Where `serve` listens: the socket and its group, the state dir, the optional metrics port."""

    socket: str
    state_dir: str
    group: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: The admin's config file (`--config`): read again on SIGHUP.
    config_path: str | None = None


def socket_folder_problem(folder: Path) -> str | None:
    """Why the socket's folder cannot be trusted, or None.

    Whoever may write in it could swap the socket for a link between bind and chmod, or plant a file of
    their own there: it must be a real folder (no symbolic link), owned by the agent's user (root when
    deployed), writable by nobody else (a sticky /tmp is refused too): `wattwise.safe_files.private_folder_problem`.
    """
    return private_folder_problem(folder)


def prepare_socket(path: Path) -> None:
    """Make the socket's folder (0755), check it, and clear a stale socket.

    Raises:
        UsageError: the folder cannot be trusted (see `socket_folder_problem`), the path is not a socket,
            or an agent already listens there.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    problem = socket_folder_problem(path.parent)
    if problem:
        raise UsageError(
            f"--socket {path}: its folder {path.parent} {problem.removeprefix('the folder ')}; "
            "use a folder only root may write, such as /run/wattwise"
        )
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
            raise UsageError(
                f"--socket {path}: replaced by something that is not the agent's socket; "
                "use a folder only root may write"
            )
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
    if group.isascii() and group.isdigit():  # a number need not be named in /etc/group (a container's)
        if int(group) > MAX_GID:
            raise UsageError(f"--group {group}: a group id is at most {MAX_GID} (a name or a number)")
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


def allocation_warning(config: AgentConfig, path: str | None) -> str | None:
    """The warning the agent gives at start (and at SIGHUP) when its allocation policy enforces nothing."""
    if config.allocation != AllocationPolicy.NONE:
        return None
    where = f"{path} says `allocation: none`" if path is not None else "no --config: `allocation: none`"
    return (
        f"wattwise agent: {where}: anyone allowed to change settings may change any free GPU, other users' "
        "jobs' GPUs too; set `allocation: registered` (SLURM: the prolog registers each job's GPUs) or "
        "`allocation: cgroup` (containers) unless this node has one user"
    )


def reload_config(agent: Agent, path: str | None) -> None:
    """SIGHUP: read the admin's config file again (bounds, allowed users and groups, allocation policy).

    A file that cannot be read or checked leaves the config in force as it was, and says why; without
    `--config` there is nothing to read again. The agent never stops on SIGHUP: leases and the journal
    are untouched, and a limit a holder set before stays until it sets another.
    """
    if path is None:
        log.warning("wattwise agent: SIGHUP: no --config to read again; nothing changed")
        return
    try:
        agent.config = load_config(path)
    except UsageError as err:
        log.error("wattwise agent: SIGHUP: %s; the config in force is kept", err)
        return
    log.warning("wattwise agent: SIGHUP: read %s again", path)
    warning = allocation_warning(agent.config, path)
    if warning is not None:
        log.warning("%s", warning)


def listen_unix(path: Path) -> socket.socket:
    """The agent's listening socket bound at `path`, mode 0600 from the start (`share_socket` opens it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # no moment where others could connect before the chmod of share_socket
    try:
        sock.bind(str(path))
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(previous)
    return sock


async def serve(
    agent: Agent,
    options: ServeOptions,
    ready: Callable[[], None] | None = None,
    *,
    identify: Callable[[socket.socket], Peer] = identify_peer,
) -> None:
    """Serve until SIGTERM or SIGINT (SIGHUP reads the config again), then restore and remove the socket.

    `identify`: how an accepted connection's peer is pinned (`wattwise.agent.processes.identify_peer`;
    tests stand other users in for the test's own process).
    """
    gid = group_id(options.group)
    path = Path(options.socket)
    prepare_socket(path)
    if options.metrics_port is not None:
        from wattwise.agent.metrics import start_metrics

        try:
            start_metrics(agent, options.metrics_host, options.metrics_port)
        except OSError as err:
            raise UsageError(
                f"--metrics-port {options.metrics_port}: cannot listen on {options.metrics_host}:"
                f"{options.metrics_port} ({err.strerror or err}); another process may hold it: choose another port"
            ) from None
    loop = asyncio.get_running_loop()
    warning = allocation_warning(agent.config, options.config_path)
    if warning is not None:
        log.warning("%s", warning)
    quiet_client_logs()
    raise_open_file_limit()
    agent.start_watching(loop)
    limits = ConnectionLimits(loop)
    # No lingering: a request refused before its body was read (413) closes its connection at once,
    # instead of reading and dropping what the client sends for another 10 s.
    runner = web.AppRunner(
        make_app(agent, limits), access_log=None, handle_signals=False, keepalive_timeout=2.0, lingering_time=0.0
    )
    await runner.setup()
    assert runner.server is not None  # set by setup()
    server = Listener(loop, listen_unix(path), runner.server, limits, identify)
    share_socket(path, gid)
    server.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload_config, agent, options.config_path)
    if ready is not None:
        ready()
    try:
        await stop.wait()
    finally:
        agent.restore_all()
        agent.journal.close()
        if agent.audit is not None:
            try:
                agent.audit.close()
            except OSError as err:
                log.error("wattwise agent: cannot write the audit log's last lines (%s)", err.strerror or err)
        server.close()
        await runner.cleanup()
        with contextlib.suppress(OSError):
            path.unlink()
