"""`wattwise dashboard` in a real browser: Debian's chromium, driven by Selenium through chromium-driver.

One module-scoped set-up: two short training runs on the simulated GPU (the framework-neutral run, in this
process: no Lightning to import), a recurring job and a frontier with its plan in a scratch store, the
dashboard started as a user starts it, and one browser for every test. Each page must load with no error in
the browser's console and show what the test made. With WATTWISE_DOCS_SCREENSHOTS=DIR, the main pages are
also saved as PNGs in DIR (how the documentation's screenshots are made). The browser tests skip, saying
so, where chromium or its driver is missing; CI installs both. One more test reads a PostgreSQL store.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.long_run import write_long_run
from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.pipeline.files import write_frontier_json, write_plan_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import Frontier, assemble_frontier, choose_intrinsic
from wattwise.record.files import read_run_dir
from wattwise.recurring.spec import JobSpec
from wattwise.run import Run
from wattwise.store.runs import RunRow, list_runs
from wattwise.store.sql import SqlJobStore

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: The flags every browser of this suite runs with: no sandbox (root in CI), no GPU, nothing fetched.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)
#: The dashboard's token in these tests (a user's is random, printed in the URL).
TOKEN = "browser-test-token-0123456789"
#: What a request outside the browser sends to be served.
AUTHORIZED = {"Authorization": f"Token {TOKEN}"}
SHORT_TUNING = [
    "monitor.sync_cuda=false",
    "monitor.sample_interval_s=0.02",
    "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.min_profile_s=0.05",
    "power_limit.step_w=50",
]


@dataclass(frozen=True)
class Dashboard:
    """What the set-up made, and the dashboard serving it."""

    url: str
    runs: list[RunRow]
    frontier: Frontier
    job: str


def train(output_dir: Path, *overrides: str, steps: int = 120) -> None:
    """A short run of the emulated workload on one simulated GPU, with a validation pause every 40 steps."""
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.01)
    run = Run(load_config(overrides=[*SHORT_TUNING, f"output_dir={output_dir}", *overrides]), devices=[gpu])
    run.start()
    for i in range(steps):
        run.step_begin()
        with gpu.busy():  # a step of the modelled time at the GPU's current limit (no torch to import)
            time.sleep(gpu.step_time_s())
        run.step_end()
        if i % 40 == 39:
            run.pause("validation")
            time.sleep(0.05)
            run.resume()
    run.finish()


def make_frontier(folder: Path) -> tuple[Frontier, Path, Path]:
    problem = problem_for(synthetic_profile(2, 3, 0.001, seed=0), "1f1b", 4, 50.0)
    frontier = assemble_frontier(problem, list(FrontierSolver(problem, 0.001).run()), unit_time_s=0.001, solver="fast")
    frontier_path, plan_path = folder / "FRONTIER.json", folder / "PLAN.json"
    write_frontier_json(frontier, frontier_path)
    write_plan_json(frontier, choose_intrinsic(frontier), plan_path)
    return frontier, frontier_path, plan_path


def make_job(url: str) -> str:
    spec = JobSpec(
        "mnist", batch_sizes=(32, 64, 128), default_batch_size=64, target_metric=0.9, max_epochs=5, max_power_w=300.0
    )
    store = SqlJobStore(url)
    try:
        store.register_job(spec, now_s=time.time())
        for batch_size, reached, cost in ((64, True, 12_000.0), (32, True, 10_000.0)):
            run = store.start_run(
                spec.name, lambda runs, limits, b=batch_size: (b, "explore", float("inf")), now_s=time.time()
            )
            store.finish_run(
                spec.name,
                run.run_id,
                reached=reached,
                epochs=3,
                energy_j=cost * 0.8,
                time_s=60.0,
                cost=cost,
                now_s=time.time(),
            )
        store.set_power_limit(spec.name, 32, 200.0)
    finally:
        store.close()
    return spec.name


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    folder = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{folder / 'jobs.sqlite'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATTWISE_STORE", url)
        mp.setenv("WATTWISE_SIMULATED_PHYSICS", "ideal")  # exact figures: tuning always resolves its choice
        train(folder / "out", "power_limit.mode=tune", "job=bert-finetune")
        train(folder / "out", "power_limit.mode=cap", "power_limit.cap_w=200", "job=bert-finetune")
    runs = list_runs(location=url)
    frontier, frontier_path, plan_path = make_frontier(folder)
    job = make_job(url)
    frontier_options = ["--frontier", str(frontier_path), "--plan", str(plan_path)]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wattwise",
            "dashboard",
            "--port",
            "0",
            "--store",
            url,
            "--token",
            TOKEN,
            *frontier_options,
        ],
        env={**os.environ, "WATTWISE_INTENSITY": "DE"},  # every table's CO2e column filled, as wide as it gets
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("wattwise dashboard: serving http://127.0.0.1:"), (
            line,
            server.stderr and server.stderr.read(),
        )
        printed = line.split()[3]
        assert printed.endswith(f"/?token={TOKEN}"), printed
        yield Dashboard(printed.removesuffix(f"?token={TOKEN}"), runs, frontier, job)
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="wattwise-chromium-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def visit(browser: Any, url: str, screenshot: str | None = None) -> None:
    """Open `url`, wait until its charts are drawn, and fail on any error in the browser's console."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get_log("browser")  # what an earlier page left
    if url.startswith("http"):  # the dashboard's: with its token, as the printed URL has it
        url += ("&" if "?" in url else "?") + f"token={TOKEN}"
    browser.get(url)
    WebDriverWait(browser, 30).until(
        lambda b: b.execute_script(
            "return document.readyState === 'complete' && "
            "Array.from(document.querySelectorAll('.plotly-graph-div')).every(d => d._fullLayout)"
        )
    )
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors
    shots = os.environ.get("WATTWISE_DOCS_SCREENSHOTS")
    if shots and screenshot:
        for _ in range(2):  # the charts lay themselves out again in the taller window
            height = browser.execute_script(  # the whole page, and the window's own frame
                "return document.documentElement.scrollHeight + window.outerHeight - window.innerHeight"
            )
            browser.set_window_size(1280, min(max(height, 600), 2400))
            time.sleep(0.5)
        browser.save_screenshot(str(Path(shots) / screenshot))
        browser.set_window_size(1280, 1000)


def trace(browser: Any, element_id: str, index: int) -> dict[str, Any]:
    """The points of one trace of a chart on the page, as the browser holds them."""
    script = (
        "const t = document.getElementById(arguments[0]).data[arguments[1]]; return {x: t.x, y: t.y, name: t.name};"
    )
    result: dict[str, Any] = browser.execute_script(script, element_id, index)
    return result


def test_the_runs_table_lists_the_runs_the_test_made(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    assert len(dashboard.runs) == 2
    visit(browser, dashboard.url, "dashboard-runs.png")
    listed = [row.get_attribute("data-run") for row in browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")]
    assert sorted(listed) == sorted(r.id for r in dashboard.runs)
    assert "SIMULATED" in browser.find_element(By.ID, "runs-table").text


def test_sorting_and_filtering_the_runs_table(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def loaded(*parts: str) -> None:
        """Wait until the page a click asked for is loaded (a busy machine takes its time)."""
        WebDriverWait(browser, 30).until(
            lambda b: (
                all(p in b.current_url for p in parts) and b.execute_script("return document.readyState") == "complete"
            )
        )

    visit(browser, dashboard.url)
    browser.find_element(By.CSS_SELECTOR, 'th[data-column="energy_j"] a').click()  # most energy first
    loaded("sort=energy_j")
    listed = [row.get_attribute("data-run") for row in browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")]
    assert listed == [r.id for r in sorted(dashboard.runs, key=lambda r: -r.energy_j)]
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("completed")
    browser.find_element(By.ID, "filter-apply").click()
    loaded("status=completed", "sort=energy_j")  # the filter keeps the sort


def test_a_runs_page_charts_every_power_sample_and_says_simulated(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    tuned = next(r for r in dashboard.runs if r.mode == "tune")
    visit(browser, f"{dashboard.url}run?id={tuned.id}", "dashboard-run.png")
    (samples,) = read_run_dir(tuned.folder).traces or ()
    power = trace(browser, "power-chart", 0)
    assert len(power["x"]) == len(samples.timestamps_s) > 10
    assert power["y"] == pytest.approx(samples.power_w.tolist())
    title = browser.execute_script("return document.getElementById('power-chart').layout.title.text")
    assert title == "Power and power limit (SIMULATED)"
    assert browser.find_elements(By.ID, "profile-chart") and browser.find_element(By.ID, "simulated-banner")


def test_a_comparison_shows_the_two_runs_ticked_in_the_table(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    visit(browser, dashboard.url)
    for box in browser.find_elements(By.CSS_SELECTOR, '#runs-table input[name="id"]'):
        box.click()
    browser.find_element(By.ID, "compare-button").click()
    WebDriverWait(browser, 30).until(lambda b: "/compare?" in b.current_url)  # the click's page, not the table's
    visit(browser, browser.current_url, "dashboard-compare.png")
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#compare-table thead th")][1:]
    assert sorted(heads) == sorted(r.id for r in dashboard.runs)
    energy = trace(browser, "compare-chart-0", 0)
    assert sorted(energy["x"]) == sorted(r.id for r in dashboard.runs)
    assert len(browser.execute_script("return document.getElementById('compare-chart-1').data")) == 2


def test_the_recurring_job_page_shows_the_search_and_its_costs(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    visit(browser, f"{dashboard.url}jobs")
    browser.find_element(By.LINK_TEXT, dashboard.job).click()
    visit(browser, browser.current_url, "dashboard-job.png")
    assert "batch sizes tried 32, 64" in browser.find_element(By.ID, "bandit-state").text
    (limit,) = [
        row.text
        for row in browser.find_elements(By.CSS_SELECTOR, "#batch-sizes tbody tr")
        if row.text.startswith("32 ")
    ]
    assert limit.endswith(" 200")  # the limit remembered for batch size 32
    costs = trace(browser, "job-chart-0", 0)
    assert sorted(costs["y"]) == [10_000.0, 12_000.0]


def test_a_jobs_page_shows_the_limit_its_tuned_run_left_and_its_runs(dashboard: Dashboard, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    tuned = next(r for r in dashboard.runs if r.mode == "tune")
    visit(browser, f"{dashboard.url}jobs")
    browser.find_element(By.LINK_TEXT, "bert-finetune").click()
    visit(browser, browser.current_url)
    (remembered,) = browser.find_elements(By.CSS_SELECTOR, "#job-limits tbody tr")
    key, limit = (cell.text for cell in remembered.find_elements(By.TAG_NAME, "td")[:2])
    assert key.startswith("bert-finetune|") and float(limit) == tuned.power_limit_w
    listed = [row.get_attribute("data-run") for row in browser.find_elements(By.CSS_SELECTOR, "#job-history tbody tr")]
    assert sorted(listed) == sorted(r.id for r in dashboard.runs)


def test_the_frontier_page_draws_every_point_and_the_plan(dashboard: Dashboard, browser: Any) -> None:
    visit(browser, f"{dashboard.url}frontier", "dashboard-frontier.png")
    points = trace(browser, "frontier-chart", 0)
    assert points["x"] == pytest.approx([p.time_s for p in dashboard.frontier.points])
    rows = browser.execute_script("return document.getElementById('plan-chart').data[0].z.length")
    assert rows == dashboard.frontier.stages


#: What a page's tables and charts take of the window: the page's own width, and each table's box and contents.
LAYOUT = """
const view = window.innerWidth;
const boxes = Array.from(document.querySelectorAll('table, .plotly-graph-div')).map(el => {
  const box = el.closest('.table-scroll') || el;
  box.scrollLeft = box.scrollWidth;  // the far end of a table that scrolls
  const cells = el.tagName === 'TABLE' ? el.querySelectorAll('tr:first-child > *') : [el];
  return {
    id: el.id,
    box_right: box.getBoundingClientRect().right,
    scrolls: box.scrollWidth > box.clientWidth,
    overflow: getComputedStyle(box).overflowX,
    last_right: cells[cells.length - 1].getBoundingClientRect().right,
  };
});
return {view: view, page: document.documentElement.scrollWidth, boxes: boxes};
"""


def test_at_1280_px_the_runs_table_fits_and_its_figures_are_right_aligned(dashboard: Dashboard, browser: Any) -> None:
    visit(browser, dashboard.url)
    layout = browser.execute_script(LAYOUT)
    assert layout["view"] == 1280 and layout["page"] <= layout["view"]
    (table,) = [b for b in layout["boxes"] if b["id"] == "runs-table"]
    assert not table["scrolls"] and table["last_right"] <= layout["view"], table  # every column in sight
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('#runs-table tbody tr:first-child td'))"
        ".map(td => [td.textContent.trim(), getComputedStyle(td).textAlign]);"
    )
    assert not [text for text, _ in cells if "class=" in text]  # markup is markup, not text in a cell
    assert [text for text, _ in cells if " g CO2e at " in text and "gCO2e/kWh" in text]  # the last column, in sight
    aligned = dict(cells)
    first = next(r for r in dashboard.runs if f"{r.energy_j:,.1f}" in aligned)
    assert aligned[f"{first.energy_j:,.1f}"] == "right" and aligned["bert-finetune"] in ("left", "start")


def test_at_390_px_tables_scroll_inside_the_page_rather_than_being_cut_off(dashboard: Dashboard, browser: Any) -> None:
    tuned = next(r for r in dashboard.runs if r.mode == "tune")
    browser.set_window_size(390, 844)  # a phone's width
    try:
        for path in ("", f"run?id={tuned.id}", f"compare?id={dashboard.runs[0].id}&id={dashboard.runs[1].id}", "jobs"):
            visit(browser, f"{dashboard.url}{path}")
            layout = browser.execute_script(LAYOUT)
            assert layout["view"] <= 400 and layout["page"] <= layout["view"], (path, layout)  # nothing wider
            for box in layout["boxes"]:
                assert box["box_right"] <= layout["view"] + 1, (path, box)
                assert not box["scrolls"] or box["overflow"] in ("auto", "scroll"), (path, box)
                assert box["last_right"] <= layout["view"] + 1, (path, box)  # scrolled to, its last column shows
    finally:
        browser.set_window_size(1280, 1000)


def test_the_report_of_a_run_with_400_pauses_draws_every_pause(browser: Any, tmp_path: Path) -> None:
    """Eight days, 400 validation and checkpoint pauses: the report is written and drawn, each pause shaded."""
    run = write_long_run(tmp_path / "run", days=8.0, pauses=400)
    page = tmp_path / "page.html"
    done = subprocess.run(
        [sys.executable, "-m", "wattwise", "report", str(run), "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    visit(browser, page.as_uri())
    shapes = browser.execute_script("return document.getElementById('power-chart').layout.shapes.length")
    drawn = browser.execute_script(
        "return document.querySelectorAll('#power-chart .layer-below .shapelayer path').length"
    )
    assert shapes == drawn == 400
    title = browser.execute_script("return document.getElementById('power-chart').layout.xaxis.title.text")
    assert title == "time since start (min)"


def test_the_dashboard_is_read_only(dashboard: Dashboard) -> None:
    request = urllib.request.Request(dashboard.url, data=b"", method="POST", headers=AUTHORIZED)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(
            urllib.request.Request(f"{dashboard.url}run?id=20000101T000000Z-000000", headers=AUTHORIZED), timeout=10
        )
    assert missing.value.code == 404
    assert "no run '20000101T000000Z-000000' in the store" in html.unescape(missing.value.read().decode())


def test_the_pages_read_a_postgresql_store(fresh_postgres: str) -> None:
    """A team's store: the runs table, a comparison and a job's page from PostgreSQL, as from SQLite."""
    from tests.support.run_history import make_row
    from wattwise.dashboard import pages
    from wattwise.dashboard.history import History
    from wattwise.store.runs import record_run

    first, second = make_row("20261201T100000Z-aaaaaa"), make_row("20261201T110000Z-bbbbbb", energy_j=25_000.0)
    for row in (first, second):
        assert record_run(row, location=fresh_postgres) is None
    job = make_job(fresh_postgres)
    history = History(fresh_postgres)
    html = pages.runs_page(history.runs(), pages.RunFilter.of({}), source=history.shown)
    assert f'data-run="{first.id}"' in html and f'data-run="{second.id}"' in html and "postgresql" in html
    rows = history.several([first.id, "20261201T11"])
    assert "-5,000.0 J (-16.7%)" in pages.compare_page(rows, [None, None])
    assert "batch sizes tried" in pages.job_page(history.job(job))


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dashboard over a store of 20,000 runs and one row that does not read as a run: its base URL."""
    from tests.support.many_runs import write_many_runs

    store = tmp_path_factory.mktemp("crowded") / "jobs.sqlite"
    write_many_runs(store, 20_000, hostile=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "wattwise", "dashboard", "--port", "0", "--store", str(store), "--token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield server.stdout.readline().split()[3].removesuffix(f"?token={TOKEN}")
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0


def test_a_store_of_20000_runs_and_one_unreadable_row_shows_a_page_of_runs_and_names_the_row(
    crowded: str, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    from tests.support.many_runs import HOSTILE_ID
    from wattwise.dashboard.pages import PAGE_SIZE

    visit(browser, crowded)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")) == PAGE_SIZE
    assert f"page 1 of {20_000 // PAGE_SIZE}" in browser.find_element(By.ID, "runs-pages").text
    assert f"run {HOSTILE_ID} is unreadable" in browser.find_element(By.ID, "unreadable-runs").text
    browser.find_element(By.ID, "page-next").click()
    visit(browser, browser.current_url)
    assert f"page 2 of {20_000 // PAGE_SIZE}" in browser.find_element(By.ID, "runs-pages").text


def test_without_its_token_or_under_another_name_the_dashboard_answers_403(dashboard: Dashboard) -> None:
    for headers in ({}, {**AUTHORIZED, "Host": "rebound.example:8050"}):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(dashboard.url, headers=headers), timeout=10)
        assert refused.value.code == 403
        assert not any(r.id in refused.value.read().decode() for r in dashboard.runs)
