"""The dashboard's web server: aiohttp, GET only, the pages of `wattwise.dashboard.pages`.

Routes (every one read-only; any other method is refused with 405):

- `/`: the runs table (`?job=`, `?status=`, `?since=YYYY-MM-DD`, `?sort=COLUMN&order=asc|desc`);
- `/run?id=ID`: a run's page; `/compare?id=ID&id=ID...`: runs side by side;
- `/jobs`, `/job?name=NAME`: the recurring jobs;
- `/frontier`: the pipeline frontier given at start, with its plan;
- `/static/plotly.min.js`: Plotly's JavaScript, served from the installed plotly package (no network).

A page is built in a worker thread (reading a run's power.csv takes a while for a long run), so one slow
page never stalls the others. A request the pages refuse (`UsageError`: no such run, a bad filter) is a
page that says why, with status 400 or 404; a store that cannot be reached is 503.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from wattwise.dashboard import pages
from wattwise.dashboard.history import History, folder_gone, run_folder
from wattwise.errors import Unavailable, UsageError
from wattwise.extras import require

if TYPE_CHECKING:
    from aiohttp import web

T = TypeVar("T")


class NotFound(UsageError):
    """The run or job a request names is not in the store, or its folder is gone: a 404."""


def _found(lookup: Callable[[], T]) -> T:
    """What `lookup` finds; its `UsageError` (no such run or job) becomes `NotFound`."""
    try:
        return lookup()
    except UsageError as err:
        raise NotFound(str(err)) from None


def build_app(history: History, frontier: pages.FrontierView | None = None) -> web.Application:
    """The dashboard's application over `history`, showing `frontier` on its frontier page.

    Args:
        history: The store to read runs and recurring jobs from.
        frontier: The frontier (and plan) to show; None: the frontier page says how to give one.
    """
    aiohttp_web = require("aiohttp.web", "`wattwise dashboard`", extra="dashboard")
    plotly_js: list[bytes] = []

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
            f = pages.RunFilter.of(request.query)
            return pages.runs_page(history.runs(), f, source=history.shown)

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
            ids = request.query.getall("id", [])
            if len(ids) < 2:
                raise UsageError("id: tick at least two runs in the runs table to compare them (/compare?id=A&id=B)")
            rows = _found(lambda: history.several(ids))
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

    app = aiohttp_web.Application()
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
