"""`wattwise dashboard`: a local, read-only web page over the run history, recurring jobs and a frontier.

    wattwise dashboard [--host 127.0.0.1] [--port 8050] [--store URL] [--frontier FRONTIER.json [--plan PLAN.json]]
                       [--token TOKEN] [--allow-host NAME ...] [--project NAME]

Everything given is checked before the server starts (a bad store location, frontier or plan exits 2 with
one line); then it serves until Ctrl-C or SIGTERM. It serves only whoever has its token: the URL it prints
carries it (`?token=...`, a new random one each start unless --token or $WATTWISE_DASHBOARD_TOKEN gives
one), as Jupyter's does, so another user of the machine who finds the port gets 403. The runs table opens
on the runs of the project it was started in (`--project`, else the working directory's git root's or
folder's name, as runs record it), with a link to every project's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import secrets
import signal
import sys
from collections.abc import Coroutine
from typing import Any

from wattwise.cli.main import add_command
from wattwise.errors import UsageError

DEFAULT_PORT = 8050
#: The environment variable that gives the dashboard's token (else a random one each start).
TOKEN_ENV = "WATTWISE_DASHBOARD_TOKEN"
#: The shortest token taken: 128 bits of letters and digits cannot be guessed.
MIN_TOKEN_CHARS = 22


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise dashboard` command to the `wattwise` parser."""
    parser = add_command(subparsers, "dashboard")
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine only)"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port to listen on (default %(default)s; 0: a free one)"
    )
    parser.add_argument("--store", help="SQLite file path or database URL (default: $WATTWISE_STORE or the state dir)")
    parser.add_argument("--frontier", metavar="FRONTIER.json", help="a frontier written by wattwise frontier, to show")
    parser.add_argument("--plan", metavar="PLAN.json", help="the plan wattwise plan chose from --frontier, to show")
    parser.add_argument(
        "--token",
        help=f"the token every request must carry (default: ${TOKEN_ENV}, else a random one, in the printed URL)",
    )
    parser.add_argument(
        "--project",
        help="the project whose runs the runs table shows first (default: the working directory's project, its git "
        "root's or folder's name; the page links to every project's runs)",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name (besides IP addresses and localhost) that browsers may reach the dashboard under; repeatable",
    )
    parser.set_defaults(func=run)


def _token(given: str | None) -> str:
    """--token, else $WATTWISE_DASHBOARD_TOKEN, else a new random token; refused when short or not URL-safe."""
    flag = "--token" if given is not None else TOKEN_ENV
    token = given if given is not None else os.environ.get(TOKEN_ENV)
    if token is None:
        return secrets.token_urlsafe(24)
    if len(token) < MIN_TOKEN_CHARS or not all(c.isascii() and (c.isalnum() or c in "-_.~") for c in token):
        raise UsageError(
            f"{flag} must be at least {MIN_TOKEN_CHARS} letters, digits, '-', '_', '.' or '~' (got "
            f"{len(token)} characters); leave it unset for a random one"
        )
    return token


def run(args: argparse.Namespace) -> int:
    """Run `wattwise dashboard` with its parsed arguments.

    Returns:
        The exit status: 0 once stopped by Ctrl-C or SIGTERM.
    """
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be 0 to 65535 (got {args.port}); 0 picks a free port")
    if args.plan and not args.frontier:
        raise UsageError("--plan needs --frontier: give the FRONTIER.json the plan was chosen from")
    token = _token(args.token)
    if not _host_name(args.host):
        raise UsageError(
            f"--host: {args.host[:70]!r} is neither an IP address nor a host name (labels of 1 to 63 letters, "
            "digits or '-'); give one such as 127.0.0.1"
        )
    for name in args.allow_host:
        if not _host_name(name):
            raise UsageError(f"--allow-host: {name[:70]!r} is not a host name; give one such as dashboard.example.org")
    from wattwise.extras import require

    for module in ("aiohttp.web", "plotly.graph_objects", "jinja2"):  # one line naming the extra, before serving
        require(module, "`wattwise dashboard`", extra="dashboard")
    from wattwise.dashboard.history import History
    from wattwise.dashboard.pages import load_frontier
    from wattwise.dashboard.server import build_app, serve

    history = History(args.store)
    frontier = load_frontier(args.frontier, args.plan) if args.frontier else None
    from wattwise.project import project_of

    project = project_of(args.project)  # as a run started here records it
    app = build_app(history, frontier, token=token, hosts=[args.host, *args.allow_host], project=project)

    def started(url: str) -> None:
        print(f"wattwise dashboard: serving {url}?token={token} (read-only; Ctrl-C to stop)", flush=True)
        if not _loopback(args.host):
            print(
                f"wattwise dashboard: listening on {args.host}: anyone who can reach this machine and has the URL's "
                "token sees its runs (over plain HTTP: the token crosses the network unencrypted)",
                file=sys.stderr,
                flush=True,
            )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_signalled(serve(app, args.host, args.port, started)))
    return 0


async def _serve_until_signalled(serving: Coroutine[Any, Any, None]) -> None:
    """Run the server until SIGTERM or SIGINT (Ctrl-C), then stop it cleanly."""
    task = asyncio.ensure_future(serving)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _host_name(text: str) -> bool:
    """Whether `text` is an IP address or a DNS name (labels of 1 to 63 letters, digits or '-', 253 in all)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        labels = text.removesuffix(".").split(".")
        return 0 < len(text) <= 253 and all(
            0 < len(label) <= 63 and label.isascii() and all(c.isalnum() or c == "-" for c in label) for label in labels
        )
    return True


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
