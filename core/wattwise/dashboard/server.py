"""The dashboard's web server: aiohttp, GET only, the pages of `wattwise.dashboard.pages`.

Routes (every one read-only; any other method is refused with 405):

- `/`: the runs table (`?project=`, `?job=`, `?status=`, `?since=YYYY-MM-DD`, `?sort=COLUMN&order=asc|desc`,
  `?page=N`); without `?project=`, the runs of the dashboard's own project, `?project=` (empty): every project's;
- `/run?id=ID`: a run's page; `/compare?id=ID&id=ID...`: runs side by side;
- `/jobs`, `/job?name=NAME`: the recurring jobs;
- `/frontier`: the pipeline frontier given at start, with its plan;
- `/static/plotly.min.js`: Plotly's JavaScript, served from the installed plotly package (no network).

A page is built in a worker thread (reading a run's power.csv takes a while for a long run), so one slow
page never stalls the others. A request the pages refuse (`UsageError`: no such run, a bad filter) is a
page that says why, with status 400 or 404; a store that cannot be reached is 503. `/compare` reads each
run once however often it is named, and at most `MAX_COMPARED` runs; the runs table is paginated.

Who it serves: every request must carry the server's token (as Jupyter's does): `?token=` in the URL
`wattwise dashboard` prints, which sets an HttpOnly, SameSite=Strict cookie for the pages that follow, or
an `Authorization: Token ...` header; without it the answer is 403. And its `Host` header must name this
server (an IP address, `localhost`, or a name given with `--host`/`--allow-host`), so that a page of
another site whose name an attacker points at 127.0.0.1 (DNS rebinding) is refused too.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from wattwise.dashboard import pages
from wattwise.dashboard.history import History, folder_gone, run_folder
from wattwise.errors import Unavailable, UsageError
from wattwise.extras import require

if TYPE_CHECKING:
    from aiohttp import web

T = TypeVar("T")

#: The most runs one `/compare` reads (each run's power.csv is read whole).
MAX_COMPARED = 12
#: The cookie that carries the token once the printed URL was opened.
TOKEN_COOKIE = "wattwise_dashboard_token"


def host_allowed(host: str, names: Iterable[str]) -> bool:
    """Whether a request's `Host` (its port dropped) names this server: an IP address, `localhost`, or one of `names`.

    A DNS-rebinding page reaches the server under a name of the attacker's, never as an address.
    """
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8050
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name in ("localhost", *(n.lower() for n in names))
    return True


def given_token(request: web.Request) -> tuple[str, bool]:
    """The token a request carries, and whether it came in the URL (then the answer sets the cookie)."""
    in_url = request.query.get("token")
    if in_url is not None:
        return in_url, True
    header = request.headers.get("Authorization", "")
    if header[:6].lower() == "token ":
        return header[6:].strip(), False
    return request.cookies.get(TOKEN_COOKIE, ""), False


class NotFound(UsageError):
    """The run or job a request names is not in the store, or its folder is gone: a 404."""


def _found(lookup: Callable[[], T]) -> T:
    """What `lookup` finds; its `UsageError` (no such run or job) becomes `NotFound`."""
    try:
        return lookup()
    except UsageError as err:
        raise NotFound(str(err)) from None


def build_app(
    history: History,
    frontier: pages.FrontierView | None = None,
    *,
    token: str | None = None,
    hosts: Iterable[str] = (),
    project: str | None = None,
) -> web.Application:
    """The dashboard's application over `history`, showing `frontier` on its frontier page.

    Args:
        history: The store to read runs and recurring jobs from.
        frontier: The frontier (and plan) to show; None: the frontier page says how to give one.
        token: What every request must carry (see the module docstring); None: no token is asked for.
        hosts: The names besides IP addresses and `localhost` that a request's `Host` may give.
        project: The project whose runs the runs table shows unless its query names another (`?project=`:
            every project's); None, or a project with no run in the history: every project's.
    """
    aiohttp_web = require("aiohttp.web", "`wattwise dashboard`", extra="dashboard")
    plotly_js: list[bytes] = []
    allowed = tuple(hosts)

    def refused(status: int, message: str) -> web.Response:
        return aiohttp_web.Response(text=pages.error_page(status, message), status=status, content_type="text/html")

    @aiohttp_web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not host_allowed(request.headers.get("Host", ""), allowed):
            return refused(
                403,
                "this dashboard answers only under its own address: open it at the URL `wattwise dashboard` "
                "printed (a name of its own is given with --allow-host NAME)",
            )
        from_url = False
        if token is not None:
            given, from_url = given_token(request)
            if not hmac.compare_digest(given.encode(), token.encode()):
                return refused(
                    403,
                    "this dashboard needs its token: open the URL `wattwise dashboard` printed, with its "
                    "?token=..., or send the header Authorization: Token ...",
                )
        response = await handler(request)
        if from_url:
            response.set_cookie(TOKEN_COOKIE, token or "", httponly=True, samesite="Strict", path="/")
        return response

    async def page(build: Callable[[], str]) -> web.Response:
        try:
            html = await asyncio.to_thread(build)
        except UsageError as err:
            status = 404 if isinstance(err, NotFound) else 400
            return aiohttp_web.Response(
                text=pages.error_page(status, str(err)), status=status, content_type="text/html"
            )
        except Unavailable as err:
            return aiohttp_web.Response(text=pages.error_page(503, str(err)), status=503, content_type="text/html")
        return aiohttp_web.Response(text=html, content_type="text/html")

    async def runs(request: web.Request) -> web.Response:
        def build() -> str:
            listing = history.listing()
            own = project if project is not None and any(r.project == project for r in listing.runs) else None
            f = pages.RunFilter.of(request.query, default_project=own)
            return pages.runs_page(listing.runs, f, source=history.shown, unreadable=listing.unreadable)

        return await page(build)

    async def run(request: web.Request) -> web.Response:
        def build() -> str:
            run_id = request.query.get("id")
            if not run_id:
                raise UsageError("id: give the run to show, /run?id=ID (an id from the runs table)")
            row = _found(lambda: history.run(run_id))
            folder = run_folder(row)
            if folder is None:
                raise NotFound(str(folder_gone(row)))
            return pages.run_page(folder, pages.SERVED, title=f"Run {row.id}")

        return await page(build)

    async def compare(request: web.Request) -> web.Response:
        def build() -> str:
            ids = list(dict.fromkeys(request.query.getall("id", [])))  # each run once, in the order first given
            if len(ids) < 2:
                raise UsageError("id: tick at least two runs in the runs table to compare them (/compare?id=A&id=B)")
            if len(ids) > MAX_COMPARED:
                raise UsageError(f"id: compare at most {MAX_COMPARED} runs at once (got {len(ids)})")
            rows = list({r.id: r for r in _found(lambda: history.several(ids))}.values())  # prefixes of one run
            if len(rows) < 2:
                raise UsageError("id: the ids given name one run; tick at least two runs to compare them")
            return pages.compare_page(rows, [run_folder(r) for r in rows])

        return await page(build)

    async def jobs(request: web.Request) -> web.Response:
        return await page(lambda: pages.jobs_page(history.jobs(), history.job_names(), store=history.shown))

    async def job(request: web.Request) -> web.Response:
        def build() -> str:
            name = request.query.get("name")
            if not name:
                raise UsageError("name: give the job to show, /job?name=NAME (a job from the jobs page)")
            return pages.job_page(_found(lambda: history.job(name)))

        return await page(build)

    async def frontier_view(request: web.Request) -> web.Response:
        return await page(functools.partial(pages.frontier_page, frontier))

    async def plotly(request: web.Request) -> web.Response:
        if not plotly_js:
            offline = require("plotly.offline", "`wattwise dashboard`", extra="dashboard")
            plotly_js.append(offline.get_plotlyjs().encode())
        return aiohttp_web.Response(
            body=plotly_js[0],
            content_type="application/javascript",
            headers={"Cache-Control": "max-age=3600"},
        )

    app = aiohttp_web.Application(middlewares=[guard])
    app.router.add_get(pages.RUNS_PATH, runs)
    app.router.add_get(pages.RUN_PATH, run)
    app.router.add_get(pages.COMPARE_PATH, compare)
    app.router.add_get(pages.JOBS_PATH, jobs)
    app.router.add_get(pages.JOB_PATH, job)
    app.router.add_get(pages.FRONTIER_PATH, frontier_view)
    app.router.add_get(pages.PLOTLY_PATH, plotly)
    return app


async def serve(app: web.Application, host: str, port: int, started: Callable[[str], None]) -> None:
    """Serve `app` on `host`:`port` until cancelled; `started` is given the URL once it listens.

    Raises:
        UsageError: nothing can listen there (the port is taken, the host is not this machine's).
    """
    aiohttp_web = require("aiohttp.web", "`wattwise dashboard`", extra="dashboard")
    runner = aiohttp_web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = aiohttp_web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as err:
            raise UsageError(
                f"--port {port}: cannot listen on {host}:{port} ({err.strerror or err}); choose another port "
                "(--port 0 picks a free one) or --host"
            ) from None
        bound = runner.addresses[0]
        shown_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        started(f"http://{shown_host}:{bound[1]}/")
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
