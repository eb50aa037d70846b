"""The dashboard's pages and charts, built in-process from run folders, a store and a frontier: what a user
sees on each page (the runs, their figures, the marks of simulated figures), and what a bad request says."""

from __future__ import annotations

import ast
import json
import re
import sys
from html import escape as html_escape
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.pipeline import problem_for, synthetic_profile
from tests.support.run_history import make_row
from tests.support.run_records import TUNED_PAID, write_tuned_run
from wattwise.cli.main import main
from wattwise.dashboard import charts, pages
from wattwise.dashboard.history import History
from wattwise.errors import UsageError
from wattwise.pipeline.files import write_frontier_json, write_plan_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import assemble_frontier, choose_for_straggler, choose_intrinsic
from wattwise.profile import ProfileEntry
from wattwise.record.files import PowerRow, WindowRow, WindowsLog, read_run_dir, write_run_dir
from wattwise.record.summary import (
    PowerLimitSummary,
    RunSummary,
    SettingEvent,
    TuningSummary,
    iso_utc,
    payback_lines,
)
from wattwise.recurring.spec import JobSpec
from wattwise.store.compare import difference
from wattwise.store.limits_memory import LimitsMemory, memory_key
from wattwise.store.runs import record_run
from wattwise.store.sql import SqlJobStore

T0_S = 1_796_119_200.0  # 2026-12-01T10:00:00Z
DEVICE = "rank0/gpu0"
PROFILE = (
    ProfileEntry(300.0, 0.100, 30.0),
    ProfileEntry(250.0, 0.104, 26.0),
    ProfileEntry(200.0, 0.112, 22.4),
    ProfileEntry(150.0, 0.140, 21.0),
)


def write_run(
    folder: Path,
    *,
    simulated: bool = True,
    job: str | None = "bert/squad",
    samples: int = 120,
    saved_uncertainty_j: float | None = None,
) -> Path:
    """A tuned run of 60 s through the record's own writers: power.csv (one sample every 0.5 s), a settings
    timeline (300 W while profiling, then 200 W), windows.csv with the profiling window and two pauses."""
    limit = PowerLimitSummary(
        mode="tune",
        selector="cost",
        eta=0.5,
        chosen_power_limit_w=200.0,
        profile=PROFILE,
        baseline_energy_j=12_000.0,
        energy_saved_j=1_520.0,
        tuning=TuningSummary(finished=True, profiled=(300.0, 250.0, 200.0, 150.0), steps_at_chosen=200),
        energy_saved_uncertainty_j=saved_uncertainty_j,
        saving_resolved=None if saved_uncertainty_j is None else saved_uncertainty_j < 1_520.0,
    )
    summary = RunSummary(
        status="completed",
        simulated=simulated,
        backend="simulated" if simulated else "nvml",
        framework="lightning",
        job=job,
        start_time=iso_utc(T0_S),
        end_time=iso_utc(T0_S + 60.0),
        time_s=60.0,
        energy_j=10_480.0,
        energy_per_device_j={DEVICE: 10_480.0},
        energy_uncertainty_j=30.0 if saved_uncertainty_j is not None else None,
        simulated_driven_by="emulated" if simulated else None,
        steps=240,
        notes=("a note the run left",),
        power_limit=limit,
        settings_timeline=(
            SettingEvent(T0_S + 1.0, DEVICE, "power_limit_w", 300.0),
            SettingEvent(T0_S + 12.0, DEVICE, "power_limit_w", 200.0),
        ),
    )
    power = [PowerRow(T0_S + 0.5 * i, DEVICE, 150.0 + (i % 7)) for i in range(samples)]
    write_run_dir(folder, summary, power)
    log = WindowsLog(folder / "windows.csv", ["gpu0"])
    for start, name, length in ((1.0, "power_limit_profile", 10.0), (20.0, "paused", 3.0), (40.0, "paused", 3.0)):
        log.write(WindowRow(T0_S + start, name, length, 100.0, {"gpu0": 100.0}, simulated=simulated))
    log.close()
    return folder


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


def test_the_power_chart_has_every_sample_the_limit_and_the_pauses_and_tuning_marked(run_dir: Path) -> None:
    run = read_run_dir(run_dir)
    fig = charts.power_figure(run, run.windows())
    power, limit = fig.data
    assert len(power.x) == 120 and power.x[1] == pytest.approx(0.5) and power.y[0] == 150.0
    assert list(limit.y) == [300.0, 200.0, 200.0] and list(limit.x) == pytest.approx([1.0, 12.0, 60.0])
    spans = [(s.name, s.x0, s.x1) for s in fig.layout.shapes]
    assert spans == [
        ("tuning: profiling power limits", 1.0, 11.0),
        ("not training (validation, checkpoint)", 20.0, 23.0),
        ("not training (validation, checkpoint)", 40.0, 43.0),
    ]
    assert fig.layout.xaxis.title.text == "time since start (s)"


def test_a_long_trace_is_drawn_as_each_buckets_low_and_high(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "MAX_POINTS_PER_DEVICE", 40)
    run = read_run_dir(write_run(tmp_path / "run", samples=400))
    (power, _) = charts.power_figure(run).data
    assert len(power.x) <= 40 and max(power.y) == 156.0 and min(power.y) == 150.0


def test_every_chart_of_a_simulated_run_says_simulated_and_a_measured_ones_do_not(tmp_path: Path) -> None:
    for simulated in (True, False):
        run = read_run_dir(write_run(tmp_path / str(simulated), simulated=simulated))
        assert run.summary.power_limit is not None
        figures = [
            charts.power_figure(run),
            charts.profile_figure(run.summary.power_limit, simulated=simulated),
            *charts.comparison_figures([charts.ComparedRun("a", 1.0, None, 1.0, simulated, charts.total_power(run))]),
        ]
        for fig in figures:
            assert fig is not None
            title = fig.layout.title.text
            marks = [a.text for a in fig.layout.annotations if a.text == charts.SIMULATED]
            assert (title.endswith("(SIMULATED)"), len(marks)) == ((True, 1) if simulated else (False, 0)), title


def test_the_tuning_profile_shows_time_and_energy_per_limit_and_the_choice(run_dir: Path) -> None:
    limit = read_run_dir(run_dir).summary.power_limit
    assert limit is not None
    fig = charts.profile_figure(limit, simulated=True)
    assert fig is not None
    energy, time = fig.data
    assert list(energy.x) == [150.0, 200.0, 250.0, 300.0] and list(energy.y) == [21.0, 22.4, 26.0, 30.0]
    assert list(time.y) == [0.140, 0.112, 0.104, 0.100]
    chosen = [a.text for a in fig.layout.annotations if a.text.startswith("chosen")]
    assert chosen == ["chosen: 200 W by cost, eta 0.5"]
    assert charts.profile_figure(PowerLimitSummary(mode="cap", chosen_power_limit_w=200.0), simulated=False) is None


def test_a_runs_page_states_the_saving_with_its_time_cost_and_uncertainty_and_the_notes(tmp_path: Path) -> None:
    run = read_run_dir(write_run(tmp_path / "unknown"))
    facts = {f.label: f.value for f in pages.run_facts(run)}
    # 200 steps at the chosen limit, each 0.012 s slower than at 300 W.
    assert facts["saving"] == (
        "1,520.0 J (12.7% of 12,000.0 J at the highest limit); for +2.40 s of time; its uncertainty is not recorded"
    )
    assert facts["energy (GPUs)"] == "10,480.0 J" and facts["backend"] == "simulated"
    known = read_run_dir(write_run(tmp_path / "known", saved_uncertainty_j=40.0))
    facts = {f.label: f.value for f in pages.run_facts(known)}
    assert facts["saving"].startswith("1520 ± 40 J (12.7% of") and facts["saving"].endswith(
        "; larger than its uncertainty"
    )
    assert facts["energy (GPUs)"] == "10480 ± 30 J"
    unresolved = read_run_dir(write_run(tmp_path / "unresolved", saved_uncertainty_j=2_000.0))
    assert pages.saving_of(unresolved.summary).text().endswith("; within its uncertainty: not resolved")
    html = pages.run_page(run, pages.SERVED, title="Run x")
    assert "a note the run left" in html
    assert (
        '<p class="simulated" id="simulated-banner">SIMULATED: every figure of this run comes from the simulated '
        "GPU&#39;s power model, not a measurement.</p>"
    ) in html
    assert f'<script src="{pages.PLOTLY_PATH}"></script>' in html
    measured = pages.run_page(read_run_dir(write_run(tmp_path / "measured", simulated=False)), pages.SERVED, title="x")
    assert "SIMULATED" not in measured


def test_report_html_writes_one_self_contained_page(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report"), "--html", str(out)]) == 0
    html = out.read_text()
    assert not re.search(r"<script[^>]+src=", html)  # nothing to fetch: Plotly is inside
    assert len(re.findall(r"\* plotly\.js v\d", html)) == 1  # the library, once
    assert 'id="power-chart"' in html and 'id="profile-chart"' in html
    assert "SIMULATED" in html and 'href="/"' not in html  # no links to a server that is not there


def test_report_html_to_a_folder_is_one_line_naming_the_option(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report"), "--html", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    fix = f"name the file to write, e.g. {tmp_path / 'run.html'}"
    assert line == f"wattwise report: error: --html {tmp_path} is a directory; {fix}"


ROWS = [
    make_row("20261201T100000Z-aaaaaa", energy_j=30_000.0),
    make_row("20261201T110000Z-bbbbbb", start_s=1_796_122_800.0, energy_j=25_000.0, status="interrupted"),
    make_row("20261202T100000Z-cccccc", start_s=1_796_205_600.0, energy_j=40_000.0, job="resnet"),
]


def test_the_runs_table_filters_and_sorts_by_any_column() -> None:
    by_energy = pages.filtered_runs(ROWS, pages.RunFilter.of({"sort": "energy_j", "order": "asc"}))
    assert [r.energy_j for r in by_energy] == [25_000.0, 30_000.0, 40_000.0]
    assert [r.id[-6:] for r in pages.filtered_runs(ROWS, pages.RunFilter.of({}))] == ["cccccc", "bbbbbb", "aaaaaa"]
    assert [r.id[-6:] for r in pages.filtered_runs(ROWS, pages.RunFilter.of({"job": "bert/squad"}))] == [
        "bbbbbb",
        "aaaaaa",
    ]
    assert [r.id[-6:] for r in pages.filtered_runs(ROWS, pages.RunFilter.of({"status": "interrupted"}))] == ["bbbbbb"]
    assert [r.id[-6:] for r in pages.filtered_runs(ROWS, pages.RunFilter.of({"since": "2026-12-02"}))] == ["cccccc"]
    with pytest.raises(UsageError, match=r"^sort: 'colour' is not a column; choose one of "):
        pages.RunFilter.of({"sort": "colour"})
    with pytest.raises(UsageError, match=r"^since: '1 Dec' is not a day; write it YYYY-MM-DD"):
        pages.RunFilter.of({"since": "1 Dec"})


def test_the_runs_page_lists_each_run_with_a_link_and_a_box_to_compare_it() -> None:
    html = pages.runs_page(ROWS, pages.RunFilter.of({"job": "bert/squad"}), source="sqlite:///jobs.sqlite")
    assert "2 of 3 runs, from sqlite:///jobs.sqlite" in html
    for row in ROWS[:2]:
        assert f'<a href="/run?id={row.id}">{row.id}</a>' in html
        assert f'<input type="checkbox" name="id" value="{row.id}"' in html
    assert ROWS[2].id not in html
    # Sorting by a column keeps the filter; the column sorted by sorts the other way next.
    assert 'href="/?job=bert%2Fsquad&amp;sort=energy_j&amp;order=desc"' in html
    assert 'href="/?job=bert%2Fsquad&amp;sort=start_time&amp;order=asc"' in html


def test_the_runs_tables_figures_are_right_aligned_and_no_markup_is_escaped_into_the_page(tmp_path: Path) -> None:
    """The figure columns carry `class="num"` as markup (right-aligned), never as escaped text in the cell."""
    html = pages.runs_page(ROWS, pages.RunFilter.of({}), source="sqlite:///jobs.sqlite")
    assert "&#34;" not in html and "&quot;" not in html
    row = html.split(f'data-run="{ROWS[0].id}"')[1].split("</tr>")[0]
    cells = re.findall(r"<td( class=\"num\")?>([^<]*)</td>", row)
    numeric = {text for css, text in cells if css}
    assert {"30,000.0", "200"} <= numeric  # energy (J), limit (W)
    assert "bert/squad" in {text for css, text in cells if not css}  # the job stays left-aligned
    assert '<th data-column="energy_j" class="num">' in html
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    record_run(make_row("20261201T100000Z-aaaaaa", job="bert"), location=url)
    job_html = pages.job_page(History(url).job("bert"))
    assert "&#34;" not in job_html and '<td class="num">30,000.0</td>' in job_html


def test_a_comparison_says_each_difference_and_whether_it_exceeds_the_uncertainty(run_dir: Path) -> None:
    first, second = ROWS[0], ROWS[1]
    assert pages.against_first(difference(first, second)) == [
        "-5,000.0 J (-16.7%)",
        "yes, larger than the measurements' uncertainty (±212.1 J)",
        "+0.00 s (+0.0%)",
        "-41.7 W",
    ]
    close = make_row("20261201T120000Z-dddddd", energy_j=30_100.0)
    assert pages.against_first(difference(first, close))[1] == "no: within the measurements' uncertainty (±212.1 J)"
    unknown = make_row("20261201T120000Z-eeeeee", energy_uncertainty_j=None)
    assert pages.against_first(difference(first, unknown))[1] == "unknown: a run's uncertainty is not recorded"
    html = pages.compare_page([first, second], [read_run_dir(run_dir), None])
    assert "-5,000.0 J (-16.7%)" in html and first.id in html and second.id in html
    assert f"No folder for {second.id}" in html
    assert 'id="compare-chart-0"' in html and 'id="compare-chart-1"' in html


def test_the_recurring_job_page_shows_the_search_its_runs_and_remembered_limits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    spec = JobSpec(
        "mnist", batch_sizes=(32, 64, 128), default_batch_size=64, target_metric=0.9, max_epochs=5, max_power_w=300.0
    )
    store = SqlJobStore(url)
    store.register_job(spec, now_s=T0_S)
    first = store.start_run("mnist", lambda runs, limits: (64, "explore", float("inf")), now_s=T0_S)
    store.finish_run(
        "mnist", first.run_id, reached=True, epochs=3, energy_j=9_000.0, time_s=60.0, cost=12_000.0, now_s=T0_S + 60
    )
    store.set_power_limit("mnist", 64, 225.0)
    store.close()
    history = History(url)
    assert [j.name for j in history.jobs()] == ["mnist"]
    job = history.job("mnist")
    assert job.recurring is not None and not job.simulated
    facts = {f.label: f.value for f in pages.bandit_state(job.recurring.spec, job.recurring.runs)}
    assert facts["phase"] == "exploring: batch size 32 is the next to try"  # pruning walks down from the default
    assert facts["batch sizes tried"] == "64" and facts["best so far (least cost per reached run)"] == "64"
    html = pages.job_page(job)
    assert 'id="job-chart-0"' in html and '<td class="num">225</td>' in html and "SIMULATED" not in html
    record_run(make_row("20261201T100000Z-aaaaaa", job="mnist"), location=url)
    assert history.job("mnist").simulated and "SIMULATED" in pages.job_page(history.job("mnist"))
    with pytest.raises(UsageError, match="no job named 'resnet'"):
        history.job("resnet")


def test_a_job_that_only_remembers_a_limit_shows_it_and_its_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.sqlite'}"
    LimitsMemory(url).save(
        memory_key("bert", "NVIDIA A40", 1), PROFILE[2], list(PROFILE), selector="cost", eta=0.5, chosen_at_s=T0_S
    )
    record_run(make_row("20261201T100000Z-aaaaaa", job="bert"), location=url)
    history = History(url)
    assert history.jobs() == [] and history.job_names() == ["bert"]
    assert '<a href="/job?name=bert">bert</a>' in pages.jobs_page(history.jobs(), history.job_names(), store=url)
    job = history.job("bert")
    assert job.recurring is None and [r.id for r in job.runs] == ["20261201T100000Z-aaaaaa"]
    assert pages.remembered_rows(job.remembered) == [
        ["bert|NVIDIA A40|x1", "200", "0.1120", "22.40", "4", "cost, eta 0.5", "2026-12-01 10:00:00"]
    ]
    html = pages.job_page(job)
    assert "<h1>Job bert</h1>" in html and 'href="/run?id=20261201T100000Z-aaaaaa"' in html
    assert "plotly" not in html.lower()  # no chart, no Plotly to load


@pytest.fixture
def frontier_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    problem = problem_for(synthetic_profile(2, 3, 0.001, seed=0), "1f1b", 2, 50.0)
    frontier = assemble_frontier(problem, list(FrontierSolver(problem, 0.001).run()), unit_time_s=0.001, solver="fast")
    path, intrinsic, straggler = tmp_path / "FRONTIER.json", tmp_path / "PLAN.json", tmp_path / "STRAGGLER.json"
    write_frontier_json(frontier, path)
    write_plan_json(frontier, choose_intrinsic(frontier), intrinsic)
    write_plan_json(frontier, choose_for_straggler(frontier, frontier.points[-1].time_s), straggler)
    return path, intrinsic, straggler


def test_the_frontier_page_draws_the_frontier_and_the_plan_chosen_from_it(
    frontier_files: tuple[Path, Path, Path],
) -> None:
    path, _, straggler = frontier_files
    view = pages.load_frontier(str(path), str(straggler))
    assert view.choice is not None and view.choice.mode == "straggler"
    fig = charts.frontier_figure(view.frontier, view.choice, source="FRONTIER.json")
    assert len(fig.data[0].x) == len(view.frontier.points) and fig.data[2].x == (view.choice.entry.time_s,)
    html = pages.frontier_page(view)
    assert 'id="frontier-chart"' in html and 'id="plan-chart"' in html and "straggler at" in html
    assert "no slowdown" in pages.frontier_page(pages.load_frontier(str(path)))
    assert 'id="frontier-missing"' in pages.frontier_page(None)


def test_a_plan_from_another_frontier_is_refused_naming_both_files(
    frontier_files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    path, intrinsic, _ = frontier_files
    other = tmp_path / "OTHER.json"
    problem = problem_for(synthetic_profile(2, 3, 0.001, seed=5), "1f1b", 2, 50.0)
    write_frontier_json(
        assemble_frontier(problem, list(FrontierSolver(problem, 0.001).run()), unit_time_s=0.001, solver="fast"), other
    )
    with pytest.raises(UsageError, match=rf"^--plan {intrinsic} was not chosen from {other}; pass the FRONTIER.json"):
        pages.load_frontier(str(other), str(intrinsic))
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(UsageError, match=r"^--plan .*broken.json: not JSON"):
        pages.load_frontier(str(path), str(tmp_path / "broken.json"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "70000"], "--port must be 0 to 65535 (got 70000); 0 picks a free port"),
        (["--plan", "PLAN.json"], "--plan needs --frontier: give the FRONTIER.json the plan was chosen from"),
    ],
)
def test_dashboard_refuses_bad_options_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"wattwise dashboard: error: {message}"]


def test_dashboard_refuses_a_broken_frontier_before_serving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "FRONTIER.json").write_text(json.dumps({"plan": []}))
    assert main(["dashboard", "--frontier", str(tmp_path / "FRONTIER.json")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("wattwise dashboard: error: ") and "this is a PLAN.json" in line


def test_dashboard_without_its_extra_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.delitem(sys.modules, "plotly.graph_objects", raising=False)
    assert main(["dashboard", "--port", "0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "wattwise dashboard: error: `wattwise dashboard` needs plotly, which is not installed: "
        "pip install 'wattwise[dashboard]' (in a clone of wattwise: pip install '.[dashboard]')"
    )


def test_the_dashboard_reads_the_record_and_the_store_and_never_touches_a_device() -> None:
    """The layer rule of an entry point beside the CLI: no import of devices, settings, the agent, the run, or the
    CLI itself (what both show, such as how two runs differ, lives below them both)."""
    forbidden = ("wattwise.devices", "wattwise.settings", "wattwise.agent", "wattwise.run", "wattwise.cli")
    found = []
    for path in sorted((REPO_ROOT / "core" / "wattwise" / "dashboard").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {name}" for name in names if name.startswith(forbidden)]
    assert found == []


#: What a run whose tuning did not finish left: the warning it gave before it ended (counting steps its own
#: way) and the summary's reason; an older wattwise also wrote a saving of 0 J, resolved.
UNFINISHED_WARNING = (
    "power-limit tuning may not finish: the run makes 12 optimizer steps; profiling every limit may need up "
    "to 127. It profiles at least 0 of 5 limits and keeps the best of them unless it finishes"
)
UNFINISHED_REASON = "the run ended after 12 optimizer steps, 116 before every limit was profiled"


def write_unfinished_run(folder: Path) -> Path:
    """A run of 12 steps whose tuning profiled one limit (300 W) of five and kept it, as an older summary says it."""
    limit = PowerLimitSummary(
        mode="tune",
        selector="cost",
        eta=0.5,
        chosen_power_limit_w=300.0,
        profile=(ProfileEntry(300.0, 0.0998, 21.6),),
        baseline_energy_j=260.0,
        energy_saved_j=0.0,
        energy_saved_uncertainty_j=0.0,
        saving_resolved=True,
        tuning=TuningSummary(finished=False, profiled=(300.0,), reason=UNFINISHED_REASON, steps_at_chosen=0),
    )
    summary = RunSummary(
        status="completed",
        simulated=True,
        backend="simulated",
        start_time=iso_utc(T0_S),
        end_time=iso_utc(T0_S + 1.2),
        time_s=1.2,
        energy_j=260.0,
        energy_per_device_j={DEVICE: 260.0},
        steps=12,
        notes=(UNFINISHED_WARNING, "a note the run left"),
        power_limit=limit,
    )
    write_run_dir(folder, summary, [PowerRow(T0_S + 0.5, DEVICE, 200.0)])
    return folder


def test_the_profile_of_one_limit_is_drawn_on_axes_with_no_negative_range(tmp_path: Path) -> None:
    limit = read_run_dir(write_unfinished_run(tmp_path / "run")).summary.power_limit
    assert limit is not None
    fig = charts.profile_figure(limit, simulated=True)
    assert fig is not None
    for axis, value in ((fig.layout.yaxis, 21.6), (fig.layout.yaxis2, 0.0998)):
        low, high = axis.range
        assert 0.0 <= low < value < high


def test_a_run_whose_tuning_did_not_finish_shows_no_saving_and_its_reason_as_one_note(tmp_path: Path) -> None:
    run = read_run_dir(write_unfinished_run(tmp_path / "run"))
    facts = {f.label: f.value for f in pages.run_facts(run)}
    assert facts["saving"] == "none: tuning did not finish (see the notes)"
    assert facts["power limit"].startswith("tuned: 300.0 W (1 limit profiled;")
    assert pages.run_notes(run) == ["a note the run left", f"Tuning did not finish: {UNFINISHED_REASON}."]
    out = tmp_path / "page.html"
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report"), "--html", str(out)]) == 0
    html = out.read_text()
    for page in (html, pages.run_page(run, pages.SERVED, title="Run x")):
        assert "larger than its uncertainty" not in page and not re.search(r"(?<![\d.])0\.0 J", page)
        assert page.count("did not finish") == 2  # the saving's fact, and the one note
        assert "may not finish" not in page


def test_a_tuned_runs_page_and_html_report_give_its_three_figures_in_order(tmp_path: Path) -> None:
    folder = write_tuned_run(tmp_path / "run", power_limit=TUNED_PAID)
    expected = payback_lines(TUNED_PAID)
    assert expected is not None
    facts = [f"{f.label}: {f.value}" for f in pages.run_facts(read_run_dir(folder))]
    at = facts.index(expected[0])
    assert facts[at : at + 3] == list(expected)
    out = tmp_path / "page.html"
    assert main(["report", str(folder), "--out", str(tmp_path / "report"), "--html", str(out)]) == 0
    html = out.read_text()
    shown = [html.index(html_escape(line.split(": ", 1)[1])) for line in expected]
    assert shown == sorted(shown)
    assert "1430 ± 150 J saved" in html and "tuning paid back after 25 steps at 175 W" in html


def test_a_comparison_gives_a_tuned_runs_saving_tuning_included(tmp_path: Path) -> None:
    """The row's 4,500 J leaves tuning's cost out; the run's summary says 1432 ± 152 J, as its page does."""
    paid = read_run_dir(write_tuned_run(tmp_path / "paid", power_limit=TUNED_PAID))
    html = pages.compare_page([ROWS[0], ROWS[1]], [paid, None])
    assert "1430 ± 150 J" in html and "3.90 s" in html
    assert "4,500.0 J" in html  # the second run, whose folder is gone: its row's saving


def test_the_runs_table_gives_each_runs_emissions_at_the_intensity_its_report_was_made_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's path: a run into OUTPUT, `wattwise report OUTPUT --intensity 400`, then the dashboard."""
    from wattwise.record.kept import keep_folder, run_row

    monkeypatch.delenv("WATTWISE_INTENSITY", raising=False)
    output = write_run(tmp_path / "wattwise_runs" / "lightning", saved_uncertainty_j=40.0)
    own = keep_folder(output, "20261201T100000Z-aaaaaa")
    row = run_row(read_run_dir(own).summary, run_id=own.name, folder=own)
    before = pages.runs_page([row], pages.RunFilter.of({}), source="test")
    assert '<th data-column="emissions">CO2e (at intensity)</th>' in before
    assert '<td class="wrap">-</td>\n    </tr>' in before and "CO2e is - where no carbon intensity is known" in before
    assert main(["report", str(output), "--pue", "1.2", "--intensity", "400"]) == 0
    html = pages.runs_page([row], pages.RunFilter.of({}), source="test")
    shown = "1.397 ± 0.004 g CO2e at 400 gCO2e/kWh"  # 10,480 ± 30 J x 1.2 at 400 g/kWh, as the statement says
    assert f'<td class="wrap">{shown}</td>' in html and "CO2e is - where" not in html
    run_page = pages.run_page(read_run_dir(own), pages.SERVED, title="run")  # the run's page: the same figure
    assert "<td>1.397 ± 0.004 g CO2e (at 400 gCO2e/kWh; constant --intensity 400)</td>" in run_page
    monkeypatch.setenv("WATTWISE_INTENSITY", "DE")
    assert " g CO2e at " in pages.runs_page([row], pages.RunFilter.of({}), source="test")
    assert shown not in pages.runs_page([row], pages.RunFilter.of({}), source="test")


HOSTILE = '<a href="https://evil">x</a>'


def strings(value: object) -> list[str]:
    """Every string in a figure's JSON."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in strings(v)]
    return []


def test_a_run_file_cannot_put_a_link_or_markup_into_a_chart(tmp_path: Path) -> None:
    """A hostile run (its device, pause kind and selector an `<a href>`): every chart shows it as text, in the
    dashboard's page and in `wattwise report --html`'s, and no link reaches a figure."""
    from dataclasses import replace

    folder = write_run(tmp_path / "run")
    run = read_run_dir(folder)
    s = run.summary
    assert s.power_limit is not None
    hostile = replace(
        s,
        energy_per_device_j={HOSTILE: s.energy_j},
        power_limit=replace(s.power_limit, selector=HOSTILE),
        settings_timeline=tuple(replace(e, device=HOSTILE) for e in s.settings_timeline),
    )
    power = [PowerRow(T0_S + 0.5 * i, HOSTILE, 150.0) for i in range(20)]
    write_run_dir(folder, hostile, power)
    log = WindowsLog(folder / "windows.csv", [HOSTILE])
    log.write(WindowRow(T0_S + 20.0, "paused", 3.0, 100.0, {HOSTILE: 100.0}, simulated=True, kind=HOSTILE))
    log.close()
    run = read_run_dir(folder)
    figures = [charts.power_figure(run, run.windows()), charts.profile_figure(run.summary.power_limit, simulated=True)]
    figures += charts.comparison_figures(
        [charts.ComparedRun(HOSTILE, 1.0, None, 1.0, True, charts.total_power(run)) for _ in range(2)]
    )
    shown = [text for fig in figures if fig is not None for text in strings(fig.to_plotly_json())]
    assert not [text for text in shown if "<a" in text or "</a>" in text]
    assert any('&lt;a href="https://evil"&gt;x&lt;/a&gt;' in text for text in shown)  # as text, escaped once
    for page in (
        pages.run_page(run, pages.SERVED, title="run"),
        pages.write_run_html(run, tmp_path / "report.html").read_text(encoding="utf-8"),
    ):
        decoded = page  # the figures' JSON as Plotly reads it (Plotly writes <, > and / as \\u escapes)
        for escape, character in (("\\u003c", "<"), ("\\u003e", ">"), ("\\u002f", "/"), ('\\"', '"')):
            decoded = decoded.replace(escape, character)
        assert '<a href="https://evil"' not in decoded and '&lt;a href="https://evil"&gt;x&lt;/a&gt;' in decoded


def test_a_run_whose_folder_holds_a_damaged_summary_costs_its_co2e_cell_alone(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "20261201T100000Z-aaaaaa"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text('{"not": "a summary"')
    row = make_row(folder.name, folder=str(folder))
    html = pages.runs_page([row, ROWS[1]], pages.RunFilter.of({}), source="test")
    assert f'data-run="{row.id}"' in html and f'data-run="{ROWS[1].id}"' in html
