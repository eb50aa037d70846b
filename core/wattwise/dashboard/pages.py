"""The dashboard's pages: HTML from Jinja2 templates, with Plotly charts, from what the record and store hold.

Every page function takes data already read and returns the page's HTML. A page is rendered for one of
two places (`Assets`): the local server, which serves Plotly's JavaScript once at `PLOTLY_PATH` and links
its pages to each other; or one self-contained file (`wattwise report RUN --html FILE`), which embeds
Plotly's JavaScript once in the page, so that it opens with no network.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise import __version__, readable
from wattwise.carbon.integrate import J_PER_KWH
from wattwise.dashboard import charts
from wattwise.errors import UsageError
from wattwise.extras import require
from wattwise.record.files import RunDir, read_summary
from wattwise.record.kept import time_cost_s
from wattwise.record.summary import (
    NEVER_APPLIED,
    SUMMARY_FILE,
    RunSummary,
    iso_utc,
    limits_profiled,
    mixed_physics,
    never_applied,
    paused_energy,
    payback_lines,
    physics_of,
    simulated_label,
    with_uncertainty,
)
from wattwise.safe_files import check_writable_target, write_text
from wattwise.vocabulary import MetricMode, PhysicsName, PlanMode, RunMode

if TYPE_CHECKING:
    import jinja2
    import plotly.graph_objects as go

    from wattwise.dashboard.history import JobHistory
    from wattwise.pipeline.plan import Choice, Frontier
    from wattwise.record.report import RunReport
    from wattwise.recurring.spec import JobSpec, StoredRun
    from wattwise.recurring.summary import JobSummary
    from wattwise.store.compare import RunDifference
    from wattwise.store.limits_memory import RememberedLimit
    from wattwise.store.runs import RunRow, UnreadableRun

#: Where the server serves Plotly's JavaScript.
PLOTLY_PATH = "/static/plotly.min.js"
#: The pages' own links, from the server's root.
RUNS_PATH, RUN_PATH, COMPARE_PATH, JOBS_PATH, JOB_PATH, FRONTIER_PATH = (
    "/",
    "/run",
    "/compare",
    "/jobs",
    "/job",
    "/frontier",
)
#: Columns of the runs table: (RunRow field, heading); each sorts the table.
RUN_COLUMNS = (
    ("id", "run"),
    ("job", "job"),
    ("framework", "framework"),
    ("mode", "mode"),
    ("status", "status"),
    ("start_time", "start (UTC)"),
    ("time_s", "time (s)"),
    ("energy_j", "energy (J)"),
    ("energy_uncertainty_j", "± (J)"),
    ("power_limit_w", "limit (W)"),
    ("saving_j", "saving (J)"),
    ("time_cost_s", "time cost (s)"),
    ("simulated", "simulated"),
)
SORTABLE = frozenset(name for name, _ in RUN_COLUMNS)
#: Runs on one page of the runs table: a store of 20,000 runs is 200 pages, each as quick as a small store's.
PAGE_SIZE = 100
#: The most pages a query may ask for (more than any store holds at `PAGE_SIZE`).
_MAX_PAGE = 10_000_000
#: Columns of the runs table that hold figures: right-aligned, so their digits line up.
NUMERIC_COLUMNS = frozenset({"time_s", "energy_j", "energy_uncertainty_j", "power_limit_w", "saving_j", "time_cost_s"})


#: The runs tables' last column, after `RUN_COLUMNS`: each run's emissions with the intensity they were
#: figured at (`row_emissions`); not sorted by, as it is figured for the runs shown only.
EMISSIONS_HEADING = "CO2e (at intensity)"
#: What the runs tables say under a run with no emissions figure.
NO_EMISSIONS = (
    "CO2e is - where no carbon intensity is known for a run (start the dashboard with $WATTWISE_INTENSITY set, "
    "e.g. to a code such as DE, or make the run's report with wattwise report RUN --intensity ...) or its "
    "folder is gone"
)


#: Columns of the runs tables whose cells may take two lines (the day over the time; the figure over its
#: intensity), so that the table fits a 1280 px window.
WRAPPING_COLUMNS = frozenset({"start_time", "emissions"})


def column_classes() -> list[str]:
    """For each column of a runs table (`RUN_COLUMNS`, then the emissions), in order, its cells' CSS class.

    "num": figures, right-aligned; "wrap": may take two lines; "": neither.
    """
    names = [name for name, _ in RUN_COLUMNS] + ["emissions"]
    return ["num" if n in NUMERIC_COLUMNS else "wrap" if n in WRAPPING_COLUMNS else "" for n in names]


@dataclass(frozen=True)
class TableRow:
    """One run's row of a runs table: its id (its page's link) and its cells, as text."""

    id: str
    cells: list[str]


def table_rows(rows: Iterable[RunRow]) -> list[TableRow]:
    """The rows of a runs table: each run's id and cells (`run_cells`, then its emissions or "-")."""
    return [TableRow(r.id, [*run_cells(r), row_emissions(r) or "-"]) for r in rows]


@dataclass(frozen=True)
class Assets:
    """Where a page finds Plotly's JavaScript, and whether it links to the server's other pages."""

    #: True: a page of the local server (`PLOTLY_PATH`, links); False: a self-contained file.
    served: bool

    def head(self) -> str:
        """The `<script>` that loads Plotly: from the server, or the whole library inline."""
        if self.served:
            return f'<script src="{PLOTLY_PATH}"></script>'
        plotly_js = require("plotly.offline", "the HTML report", extra="dashboard").get_plotlyjs()
        return f"<script>{plotly_js}</script>"


SERVED = Assets(served=True)
SELF_CONTAINED = Assets(served=False)


@dataclass(frozen=True)
class Fact:
    """One line of a page's table of facts: what, and its value as text."""

    label: str
    value: str


@dataclass(frozen=True)
class Chart:
    """A chart on a page: its element id (tests and links find it by that) and its HTML."""

    id: str
    html: str


def _environment() -> jinja2.Environment:
    jinja2 = require("jinja2", "the dashboard", extra="dashboard")
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("wattwise.dashboard", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["quote"] = lambda text: urllib.parse.quote(str(text), safe="")
    return env


_ENV: list[jinja2.Environment] = []


def render(template: str, assets: Assets, *, with_charts: bool = True, **context: Any) -> str:
    """One page: `template` with `context`; Plotly loaded as `assets` says when the page has charts."""
    if not _ENV:
        _ENV.append(_environment())
    markup = require("markupsafe", "the dashboard", extra="dashboard").Markup
    page = _ENV[0].get_template(template)
    return page.render(
        plotly=markup(assets.head() if with_charts else ""),
        served=assets.served,
        version=__version__,
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        paths={
            "runs": RUNS_PATH,
            "run": RUN_PATH,
            "compare": COMPARE_PATH,
            "jobs": JOBS_PATH,
            "job": JOB_PATH,
            "frontier": FRONTIER_PATH,
        },
        **context,
    )


def chart(fig: go.Figure, element_id: str) -> Chart:
    """A figure as a page embeds it (its data and layout; Plotly's JavaScript is loaded once by the page)."""
    html = fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=element_id,
        config={"displaylogo": False, "responsive": True},
    )
    return Chart(element_id, html)


# -- figures as text -------------------------------------------------------------------------------------
def joules(value: float | None) -> str:
    """Energy as the pages print it: joules, and kWh past 36 kJ; "-" when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    text = f"{value:,.1f} J"
    return text + f" ({value / J_PER_KWH:.4g} kWh)" if abs(value) >= 0.01 * J_PER_KWH else text


def seconds(value: float | None) -> str:
    """Time as the pages print it: seconds, and minutes or hours when long; "-" when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    text = f"{value:,.2f} s"
    if abs(value) >= 3600:
        return text + f" ({value / 3600:.2f} h)"
    return text + f" ({value / 60:.1f} min)" if abs(value) >= 120 else text


def watts(value: float | None) -> str:
    """Power as the pages print it; "-" when unknown."""
    return "-" if value is None or not math.isfinite(value) else f"{value:,.1f} W"


def energy(value: float, uncertainty_j: float | None) -> str:
    """Energy with its uncertainty, both rounded to what the uncertainty resolves; as `joules` without one."""
    if uncertainty_j is None or not uncertainty_j > 0:
        return joules(value)
    text = with_uncertainty(value, uncertainty_j, "J")
    return text + f" ({value / J_PER_KWH:.4g} kWh)" if abs(value) >= 0.01 * J_PER_KWH else text


def figure(value: float | None, uncertainty: float | None) -> str:
    """A bare figure with its uncertainty for a table cell (`1,520 ± 40`); "-" when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    return readable.with_uncertainty(value, uncertainty, grouped=True)


def number(value: float | None, digits: int = 1) -> str:
    """A bare number for a table cell; "-" when unknown."""
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


# -- a run -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Saving:
    """What a tuned limit saved against the highest limit, what time it cost, and how sure that is."""

    saving_j: float | None
    baseline_j: float | None
    time_cost_s: float | None
    #: The saving's own uncertainty (J), from its profile windows; None: not recorded.
    uncertainty_j: float | None
    #: Whether the saving is larger than its uncertainty; None: not known.
    resolved: bool | None

    def text(self) -> str:
        """One line: the saving, its share of the baseline, its time cost, and whether it is resolved."""
        if self.saving_j is None:
            return "no saving claimed"
        text = energy(self.saving_j, self.uncertainty_j)
        if self.baseline_j:
            text += f" ({self.saving_j / self.baseline_j:.1%} of {joules(self.baseline_j)} at the highest limit)"
        parts = [text]
        parts.append(f"for {self.time_cost_s:+,.2f} s of time" if self.time_cost_s is not None else "time cost unknown")
        if self.resolved is None:
            parts.append("its uncertainty is not recorded")
        elif self.resolved:
            parts.append("larger than its uncertainty")
        else:
            parts.append("within its uncertainty: not resolved")
        return "; ".join(parts)


def saving_of(summary: RunSummary) -> Saving:
    """The run's saving against the highest limit, as its summary estimates it (none for a cap)."""
    limit = summary.power_limit
    if limit is None or limit.mode == RunMode.CAP or (limit.tuning is not None and not limit.tuning.finished):
        return Saving(None, None, None, None, None)  # tuning that did not finish claims none (older files: 0 J)
    return Saving(
        limit.energy_saved_j,
        limit.baseline_energy_j,
        time_cost_s(limit),
        limit.energy_saved_uncertainty_j,
        limit.saving_resolved,
    )


#: What the banner of a run on the ideal physics adds: its figures are exact, unlike a real GPU's.
IDEAL_PHYSICS = (
    "on the ideal physics (an exact energy counter, no noise): its figures are exact and do not compare "
    "with those of the realistic physics or of a real GPU"
)


def simulated_text(summary: RunSummary) -> str | None:
    """The banner of a run with simulated figures (None on hardware): what drove the simulated GPU, its physics."""
    label = simulated_label(summary.simulated, summary.simulated_driven_by)
    if label is None:
        return None
    how = "" if label == "simulated" else f" ({label})"
    text = f"SIMULATED{how}: every figure of this run comes from the simulated GPU's power model, not a measurement"
    return text + f", {IDEAL_PHYSICS}" if physics_of(summary) == PhysicsName.IDEAL else text


def simulated_cell(simulated: bool, physics: str | None) -> str:
    """The "simulated" cell of a run: no, SIMULATED, or SIMULATED with its physics where it is known."""
    if not simulated:
        return "no"
    return f"SIMULATED ({physics} physics)" if physics else "SIMULATED"


def run_facts(run: RunDir) -> list[Fact]:
    """The table at the top of a run's page: who ran it, when, its figures and what its limit did."""
    s = run.summary
    label = simulated_label(s.simulated, s.simulated_driven_by)
    facts = [
        Fact("status", s.status or "-"),
        Fact("job", s.job or "-"),
        Fact("framework", s.framework or "-"),
        Fact("backend", (s.backend or "-") + (f" ({label})" if label and label != s.backend else "")),
        Fact("host", s.hostname or "-"),
        Fact("devices", ", ".join(s.device_names) or ", ".join(sorted(s.energy_per_device_j)) or "-"),
        Fact("start", s.start_time),
        Fact("end", s.end_time),
        Fact("time", seconds(s.time_s)),
        Fact("steps", str(s.steps) if s.steps is not None else "-"),
        Fact("energy (GPUs)", energy(s.energy_j, s.energy_uncertainty_j)),
        Fact("average power", watts(s.avg_power_w)),
    ]
    if s.cpu_energy_j is not None:
        facts.append(Fact("energy (CPU, DRAM)", joules(s.cpu_energy_j)))
    if s.resumed_energy_j:
        facts.append(Fact("energy before a resume (included)", joules(s.resumed_energy_j)))
    for kind, t in s.non_training.items():
        facts.append(Fact(f"not training: {kind}", f"{seconds(t.time_s)}, {paused_energy(t)}, {t.count}x"))
    limit = s.power_limit
    if limit is None:
        facts.append(Fact("power limit", "left as it was (measured only)"))
    elif limit.mode == RunMode.CAP:
        facts.append(Fact("power limit", f"capped at {watts(limit.chosen_power_limit_w)}"))
    else:
        how = "reused from an earlier run" if limit.reused else limits_profiled(len(limit.profile))
        chosen = watts(limit.chosen_power_limit_w) if limit.chosen_power_limit_w is not None else "none chosen"
        facts.append(Fact("power limit", f"tuned: {chosen} ({how}; selector {limit.selector}, eta {limit.eta})"))
        facts += saving_facts(s)
    if s.settings.batch_size is not None:
        facts.append(Fact("batch size", str(s.settings.batch_size)))
    if s.settings.frequency_plan:
        facts.append(Fact("frequency plan", s.settings.frequency_plan))
    facts.append(Fact("folder", str(run.path)))
    return facts


def saving_facts(summary: RunSummary) -> list[Fact]:
    """A tuned run's saving as the end-of-run text gives it: its three figures (`payback_lines`), each a fact.

    A run whose tuning did not finish claims no saving (its note says why); one without a payback (an
    older summary, a limit never applied) gives the saving its summary estimates, as before.
    """
    limit = summary.power_limit
    if limit is None or limit.mode == RunMode.CAP:
        return []
    if limit.tuning is not None and not limit.tuning.finished:
        return [Fact("saving", "none: tuning did not finish (see the notes)")]
    lines = None if never_applied(limit) else payback_lines(limit)
    if lines is None:
        return [Fact("saving", saving_of(summary).text())]
    return [Fact(*line.split(": ", 1)) for line in lines]


#: How the notes a run leaves while tuning start when they say it may not or did not finish: the page says
#: that once, with the summary's `tuning.reason` (the figures it ended with).
TUNING_UNFINISHED_NOTES = ("power-limit tuning may not finish:", "power-limit tuning did not finish:")


def run_notes(run: RunDir) -> list[str]:
    """What the run has to say: its notes, and why tuning chose nothing or never applied its choice.

    Tuning that did not finish is one note, its reason as the summary gives it, in place of the notes
    the run left on the way (a warning made before the run ended counts steps of its own).
    """
    s = run.summary
    notes = list(s.notes)
    limit = s.power_limit
    if limit is not None and never_applied(limit):
        notes.append(f"The chosen limit was never applied: {NEVER_APPLIED}.")
    if limit is not None and limit.tuning is not None and not limit.tuning.finished and limit.tuning.reason:
        notes = [n for n in notes if not n.startswith(TUNING_UNFINISHED_NOTES)]
        notes.append(f"Tuning did not finish: {limit.tuning.reason}.")
    return notes


def run_charts(run: RunDir) -> list[Chart]:
    """The run's charts: power and limit over time, then the tuning profile when it profiled limits."""
    out = [chart(charts.power_figure(run, run.windows()), "power-chart")]
    limit = run.summary.power_limit
    if limit is not None:
        profile = charts.profile_figure(limit, simulated=run.summary.simulated)
        if profile is not None:
            out.append(chart(profile, "profile-chart"))
    return out


#: What the carbon facts say when no carbon intensity is known, and how to give one.
NO_INTENSITY = (
    "not estimated: no carbon intensity given (wattwise report RUN --intensity DE, or $WATTWISE_INTENSITY; "
    "wattwise carbon codes lists the countries and cloud regions)"
)


def report_folder(run: RunDir) -> Path:
    """Where the run's own report is (`wattwise report ... --pue ... --intensity ...`): the facility inputs to carry.

    The run's own folder when it holds a report, else its output folder (`OUTPUT` of `OUTPUT/runs/ID`) when
    the report there is of this run: `wattwise report OUTPUT` reports the last run written there.
    """
    from wattwise.carbon.series import parse_timestamp_s
    from wattwise.record.kept import RUNS_FOLDER
    from wattwise.record.report import REPORT_JSON
    from wattwise.safe_files import UntrustedFile, read_trusted_json

    own = run.path
    if os.path.lexists(own / REPORT_JSON) or own.parent.name != RUNS_FOLDER:
        return own
    output = own.parent.parent
    try:
        earlier = read_trusted_json(output / REPORT_JSON, max_bytes=_REPORT_BYTES)
        times = [parse_timestamp_s(str(earlier.get(key)), where=key) for key in ("start_time", "end_time")]
    except (OSError, UntrustedFile, ValueError, UsageError):
        return own
    s = run.summary
    return output if all(abs(t - u) < 1e-3 for t, u in zip(times, (s.start_s, s.end_s), strict=True)) else own


#: The most bytes of a report.json read to tell which run it reports (a report is a few kB).
_REPORT_BYTES = 64 * 1024 * 1024


def run_report(run: RunDir) -> RunReport | str:
    """The run's energy report as its page shows it, or why there is none.

    The facility inputs are those of `$WATTWISE_INTENSITY`, else those the run's own report was made with
    (`wattwise report RUN --pue ... --intensity ...`, in `report_folder`), so the page says what the
    statement says.
    """
    from wattwise.carbon.series import intensity_given
    from wattwise.record.report import FacilityInputs, build_report, carry_inputs

    try:
        inputs, _ = carry_inputs(FacilityInputs(intensity=intensity_given(None)), report_folder(run))
        return build_report(run, inputs)
    except UsageError as err:
        return f"not estimated: {err}"


def carbon_facts(report: RunReport | str) -> list[Fact]:
    """Facility energy and emissions, each with what it was computed at (PUE, carbon intensity and sources)."""
    from wattwise.record.report import PUE_NOT_SUPPLIED

    if isinstance(report, str):
        return [Fact("emissions", report)]
    r = report
    share = (
        (r.device_energy_uncertainty_j / r.device_energy_j)
        if r.device_energy_uncertainty_j and r.device_energy_j
        else None
    )
    facility = energy(r.facility_energy_j, r.facility_energy_j * share if share else None)
    if r.pue_source == PUE_NOT_SUPPLIED:
        facility += " (no PUE given: taken as the IT energy, a lower bound)"
    else:
        facility += f" (PUE {r.pue_effective:.3g}; {r.pue_source})"
    facts = [Fact("facility energy", facility)]
    if r.emissions_kg_co2e is None or r.intensity_effective_g_per_kwh is None:
        facts.append(Fact("emissions", NO_INTENSITY))
    else:
        kg = r.emissions_kg_co2e
        at = f"at {readable.intensity(r.intensity_effective_g_per_kwh)}; {r.intensity_source}"
        facts.append(Fact("emissions", f"{readable.emissions(kg, kg * share if share else None)} ({at})"))
    if r.cost is not None:
        facts.append(Fact("electricity cost", f"{readable.sig(r.cost, 3)} {r.currency or ''} ({r.price_source})"))
    return facts


def emissions_cell(report: RunReport | str) -> str:
    """A run's emissions in a comparison's cell: the figure and the intensity it was computed at, or why none."""
    facts = {f.label: f.value for f in carbon_facts(report)}
    return facts["emissions"]


def emissions_figure(report: RunReport | str) -> str | None:
    """A run's emissions as a runs table gives them: the figure (±) and the intensity it was computed at."""
    if isinstance(report, str) or report.emissions_kg_co2e is None or report.intensity_effective_g_per_kwh is None:
        return None
    kg = report.emissions_kg_co2e
    u_j, energy_j = report.device_energy_uncertainty_j, report.device_energy_j
    uncertainty_kg = kg * u_j / energy_j if u_j and energy_j else None
    at = readable.intensity(report.intensity_effective_g_per_kwh)
    return f"{readable.emissions(kg, uncertainty_kg)} at {at}"


def row_emissions(row: RunRow) -> str | None:
    """A run's emissions for its row of a runs table (`emissions_figure`), from its folder's summary.json.

    Only the summary is read, not power.csv: the run's energy is spread evenly over its time, which gives the
    run page's figure for a constant intensity (a code, a number, or the one a report was made with). None
    when none is known or the folder is gone.
    """
    folder = Path(row.folder)
    try:
        if not os.path.isfile(folder / SUMMARY_FILE):
            return None
        summary = read_summary(folder / SUMMARY_FILE)
        return emissions_figure(run_report(RunDir(folder, summary, None)))
    except (UsageError, OSError, ValueError, ArithmeticError):  # a damaged folder costs its own cell alone
        return None


def run_page(run: RunDir, assets: Assets, *, title: str, report: RunReport | None = None) -> str:
    """A run's page: its facts, its energy's carbon, charts and notes.

    Args:
        run: The run's folder, as read.
        assets: Served, or one self-contained file.
        title: The page's heading (the run's id, or its folder).
        report: The run's energy report (`wattwise report --html` passes its own); None: `run_report`.
    """
    return render(
        "run.html",
        assets,
        title=title,
        simulated=simulated_text(run.summary),
        facts=run_facts(run) + carbon_facts(report if report is not None else run_report(run)),
        charts=run_charts(run),
        notes=run_notes(run),
    )


def write_run_html(
    run: RunDir, path: str | os.PathLike[str], *, title: str | None = None, report: RunReport | None = None
) -> Path:
    """Write a run's page as one self-contained HTML file (Plotly embedded once); returns the path.

    `report`: the energy report the page's carbon facts come from (None: `run_report`).

    Raises:
        UsageError: `path` is a folder.
    """
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--html {target} is a directory; name the file to write, e.g. {target / 'run.html'}")
    check_writable_target(target)  # before the page is built: a device, FIFO or link is refused at once
    write_text(target, run_page(run, SELF_CONTAINED, title=title or str(run.path), report=report), user_named=True)
    return target


# -- the runs table ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunFilter:
    """What the runs table shows: a project, a job, a status, runs since a day; sorted by one column."""

    job: str | None = None
    status: str | None = None
    #: A day, YYYY-MM-DD (UTC).
    since: str | None = None
    sort: str = "start_time"
    descending: bool = True
    #: Which page of `PAGE_SIZE` runs, from 1.
    page: int = 1
    #: Only this project's runs; None: every project's.
    project: str | None = None
    #: The project shown when the query names none (the dashboard's own); None: every project's.
    default_project: str | None = None

    @classmethod
    def of(cls, query: Mapping[str, str], *, default_project: str | None = None) -> RunFilter:
        """The filter of a page's query string (`?project=...&job=...&since=YYYY-MM-DD&sort=energy_j&order=asc`).

        A query without `project` shows `default_project`'s runs; `project=` (empty) shows every project's.

        Raises:
            UsageError: an unknown column to sort by, or a day that is not YYYY-MM-DD.
        """
        sort = query.get("sort") or "start_time"
        if sort not in SORTABLE:
            raise UsageError(f"sort: {sort!r} is not a column; choose one of {', '.join(sorted(SORTABLE))}")
        since = query.get("since") or None
        if since is not None:
            since_s(since)
        page = query.get("page") or "1"
        if not (page.isascii() and page.isdigit() and 1 <= int(page) <= _MAX_PAGE):
            raise UsageError(f"page: {page[:20]!r} is not a page number; give 1 or more (e.g. ?page=2)")
        return cls(
            job=query.get("job") or None,
            status=query.get("status") or None,
            since=since,
            sort=sort,
            descending=query.get("order", "desc") != "asc",
            page=int(page),
            project=(query.get("project") or None) if "project" in query else default_project,
            default_project=default_project,
        )

    def since_s(self) -> float | None:
        """The start of the `since` day (UTC) in unix seconds."""
        return since_s(self.since) if self.since else None

    def query(self, **changes: Any) -> str:
        """This filter's query string, with `changes` applied.

        The project is named whenever it differs from the default (`project=` for every project's runs), so
        that sorting and paging keep it.
        """
        f = dataclasses.replace(self, **changes)
        pairs = {
            "project": f.project if f.project != f.default_project else None,
            "job": f.job,
            "status": f.status,
            "since": f.since,
            "sort": f.sort,
            "order": "desc" if f.descending else "asc",
            "page": str(f.page) if f.page > 1 else None,
        }
        kept = {k: v for k, v in pairs.items() if v}
        if f.project is None and f.default_project is not None:
            kept = {"project": "", **kept}
        return urllib.parse.urlencode(kept)


def since_s(day: str) -> float:
    """The start (UTC) of the day YYYY-MM-DD, in unix seconds; a `UsageError` naming `since` otherwise."""
    try:
        return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise UsageError(f"since: {day!r} is not a day; write it YYYY-MM-DD (e.g. 2026-12-01)") from None


#: The columns whose cells show another figure than the row's field of that name: sorted by what is shown.
_SHOWN = {"saving_j": "run_saving_j", "time_cost_s": "run_time_cost_s"}


def _sort_key(column: str) -> Callable[[RunRow], tuple[bool, Any]]:
    def key(row: RunRow) -> tuple[bool, Any]:
        value = getattr(row, _SHOWN.get(column, column))
        return (value is None, value if value is not None else 0)

    return key


def filtered_runs(rows: Iterable[RunRow], f: RunFilter) -> list[RunRow]:
    """The rows `f` shows, in its order (unknown values last either way)."""
    since = f.since_s()
    kept = [
        r
        for r in rows
        if (f.project is None or r.project == f.project)
        and (f.job is None or r.job == f.job)
        and (f.status is None or r.status == f.status)
        and (since is None or r.start_s >= since)
    ]
    shown = _SHOWN.get(f.sort, f.sort)
    known = [r for r in kept if getattr(r, shown) is not None]
    unknown = [r for r in kept if getattr(r, shown) is None]
    return sorted(known, key=_sort_key(f.sort), reverse=f.descending) + unknown


#: What marks a saving recorded before the history kept a run's one saving (`OLD_SAVING` says what it is).
OLD_MARK = " *"
#: What the runs tables say under a saving marked `OLD_MARK`.
OLD_SAVING = (
    "* recorded before the history kept each run's one saving: the saving at the chosen limit over the steps "
    "run there, tuning's cost left out (the run's page gives this run's saving, tuning included, where its "
    "summary.json has it)"
)


def saving_cell(row: RunRow) -> str:
    """A run's saving for a runs table: this run's, tuning included (its payback), with its ±.

    A row recorded before the history kept the payback gives the saving it was recorded with, marked
    `OLD_MARK`; "-" when none is claimed.
    """
    if row.payback is not None:
        return figure(row.payback.run_energy_saved_j, row.payback.run_energy_saved_uncertainty_j)
    if row.saving_j is None:
        return "-"
    return figure(row.saving_j, row.saving_uncertainty_j) + OLD_MARK


def run_cells(row: RunRow) -> list[str]:
    """A row of the runs table, in the order of `RUN_COLUMNS`."""
    return [
        row.id,
        row.job or "-",
        row.framework or "-",
        row.mode,
        row.status or "-",
        row.start_time[:19].replace("T", " "),
        number(row.time_s, 2),
        number(row.energy_j),
        number(row.energy_uncertainty_j),
        number(row.power_limit_w, 0),
        saving_cell(row),
        number(row.run_time_cost_s, 2),
        "SIMULATED" if row.simulated else "no",
    ]


def runs_page(rows: Sequence[RunRow], f: RunFilter, *, source: str, unreadable: Sequence[UnreadableRun] = ()) -> str:
    """The runs table: filters, the runs that match them sorted by one column, a page at a time, boxes to compare.

    Args:
        rows: Every run of the history.
        f: The filter, order and page asked for.
        source: Where the runs come from (the store, or a folder), said above the table.
        unreadable: The rows of the history that do not read as runs, listed by id under the table.
    """
    matching = filtered_runs(rows, f)
    pages = max(1, math.ceil(len(matching) / PAGE_SIZE))
    page = min(f.page, pages)
    shown = matching[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    headings = [
        {
            "label": label + (" ▼" if f.sort == name and f.descending else " ▲" if f.sort == name else ""),
            "href": f"{RUNS_PATH}?{f.query(sort=name, descending=f.sort != name or not f.descending, page=1)}",
            "name": name,
            "numeric": name in NUMERIC_COLUMNS,
        }
        for name, label in RUN_COLUMNS
    ]
    headings.append({"label": EMISSIONS_HEADING, "href": None, "name": "emissions", "numeric": False})
    table = table_rows(shown)
    return render(
        "runs.html",
        SERVED,
        with_charts=False,
        title="Runs",
        source=source,
        filter=f,
        projects=sorted({r.project for r in rows if r.project} | ({f.project} if f.project else set())),
        every_project=f"{RUNS_PATH}?{f.query(project=None, page=1)}",
        default_project=(
            f"{RUNS_PATH}?{f.query(project=f.default_project, page=1)}"
            if f.default_project is not None and f.project != f.default_project
            else None
        ),
        jobs=sorted({r.job for r in rows if r.job}),
        statuses=sorted({r.status for r in rows if r.status}),
        headings=headings,
        rows=table,
        no_emissions=NO_EMISSIONS if any(row.cells[-1] == "-" for row in table) else None,
        old_saving=OLD_SAVING if any(r.payback is None and r.saving_j is not None for r in shown) else None,
        classes=column_classes(),
        total=len(rows),
        matching=len(matching),
        page=page,
        pages=pages,
        previous=f"{RUNS_PATH}?{f.query(page=page - 1)}" if page > 1 else None,
        next=f"{RUNS_PATH}?{f.query(page=page + 1)}" if page < pages else None,
        unreadable=[u.line() for u in unreadable],
    )


# -- comparing runs ----------------------------------------------------------------------------------------
def share(fraction: float | None) -> str:
    """A difference's share of the first run's figure, as text (empty when the first is 0)."""
    return "" if fraction is None else f" ({fraction:+.1%})"


def against_first(d: RunDifference) -> list[str]:
    """The cells of one run's difference from the first (`wattwise.store.compare.difference`)."""
    verdict = d.verdict(
        unknown="unknown: a run's uncertainty is not recorded",
        larger="yes, larger than the measurements' uncertainty (±{u:,.1f} J)",
        within="no: within the measurements' uncertainty (±{u:,.1f} J)",
    )
    return [
        f"{d.energy_j:+,.1f} J{share(d.energy_fraction)}",
        verdict,
        f"{d.time_s:+,.2f} s{share(d.time_fraction)}",
        f"{d.avg_power_w:+,.1f} W",
    ]


def compared_saving(row: RunRow, folder: RunDir | None) -> str:
    """A compared run's saving: this run's, tuning included, where its summary gives it; else its row's."""
    limit = folder.summary.power_limit if folder is not None else None
    if limit is not None and limit.payback is not None:
        return energy(limit.payback.run_energy_saved_j, limit.payback.run_energy_saved_uncertainty_j)
    if row.payback is not None:  # its folder is gone: the history's
        return energy(row.payback.run_energy_saved_j, row.payback.run_energy_saved_uncertainty_j)
    return energy(row.saving_j, row.saving_uncertainty_j) if row.saving_j is not None else "-"


def compared_time_cost(row: RunRow, folder: RunDir | None) -> str:
    """A compared run's time cost: the time this run added, tuning included, where its summary gives it."""
    limit = folder.summary.power_limit if folder is not None else None
    return seconds(limit.payback.run_time_added_s if limit is not None and limit.payback else row.run_time_cost_s)


def compare_page(rows: Sequence[RunRow], folders: Sequence[RunDir | None]) -> str:
    """Runs side by side: their figures, each against the first, and charts of energy, time and power.

    Args:
        rows: The runs, the first the reference.
        folders: Each run's folder as read, None where it is gone (its power is then not drawn).
    """
    from wattwise.store.compare import difference

    physics = [physics_of(folder.summary) if folder is not None else None for folder in folders]
    columns = []
    for i, (row, folder) in enumerate(zip(rows, folders, strict=True)):
        figures = [
            row.job or "-",
            row.mode,
            row.status or "-",
            row.start_time[:19].replace("T", " "),
            seconds(row.time_s),
            energy(row.energy_j, row.energy_uncertainty_j),
            watts(row.avg_power_w),
            watts(row.power_limit_w),
            compared_saving(row, folder),
            compared_time_cost(row, folder),
            simulated_cell(row.simulated, physics[i]),
            emissions_cell(run_report(folder)) if folder is not None else "not estimated: its folder is gone",
        ]
        changes = ["-"] * 4 if i == 0 else against_first(difference(rows[0], row))
        columns.append({"id": row.id, "cells": figures + changes})
    labels = [
        "job",
        "mode",
        "status",
        "start (UTC)",
        "time",
        "energy",
        "average power",
        "power limit",
        "saving",
        "time cost",
        "simulated",
        "emissions",
        "energy against the first",
        "larger than the uncertainty?",
        "time against the first",
        "average power against the first",
    ]
    compared = [
        charts.ComparedRun(
            label=row.id,
            energy_j=row.energy_j,
            energy_uncertainty_j=row.energy_uncertainty_j,
            time_s=row.time_s,
            simulated=row.simulated,
            power=charts.total_power(folder) if folder is not None else None,
        )
        for row, folder in zip(rows, folders, strict=True)
    ]
    figures = charts.comparison_figures(compared)
    return render(
        "compare.html",
        SERVED,
        title=f"Comparison of {len(rows)} runs",
        labels=labels,
        columns=columns,
        simulated=any(r.simulated for r in rows),
        mixed_physics=mixed_physics([(r.simulated, p) for r, p in zip(rows, physics, strict=True)]),
        charts=[chart(fig, f"compare-chart-{i}") for i, fig in enumerate(figures)],
        missing=[row.id for row, folder in zip(rows, folders, strict=True) if folder is None],
    )


# -- recurring jobs ----------------------------------------------------------------------------------------
def jobs_page(summaries: Sequence[JobSummary], others: Sequence[str], *, store: str) -> str:
    """The jobs page: the recurring jobs (run counts, energy, best batch size), then the other jobs runs name."""
    return render(
        "jobs.html",
        SERVED,
        with_charts=False,
        title="Jobs",
        store=store,
        jobs=summaries,
        others=[name for name in others if name not in {s.name for s in summaries}],
        joules=joules,
    )


def bandit_state(spec: JobSpec, runs: Sequence[StoredRun]) -> list[Fact]:
    """Where the batch-size search stands (wattwise's default policy), read from the job's history."""
    from wattwise.recurring.policy import WATTWISE_POLICY, best_so_far, exploration_step, outcomes_by_batch_size

    outcomes = outcomes_by_batch_size(runs)
    step = exploration_step(spec, WATTWISE_POLICY, outcomes)
    if isinstance(step, int):
        phase = f"exploring: batch size {step} is the next to try"
    elif step:
        phase = f"exploiting: Thompson sampling among the batch sizes that survived pruning, {list(step)}"
    else:
        phase = "every batch size explored failed to reach the target; the next run tries the default again"
    tried = sorted(outcomes)
    return [
        Fact("phase", phase),
        Fact("batch sizes tried", ", ".join(str(b) for b in tried) or "none yet"),
        Fact("best so far (least cost per reached run)", str(best_so_far(spec, outcomes))),
        Fact("open runs", str(sum(not r.finished for r in runs))),
    ]


def remembered_rows(remembered: Mapping[str, RememberedLimit]) -> list[list[str]]:
    """The cells of the remembered-limits table: the key, the limit, its step's figures, what chose it and when."""
    rows = []
    for key, limit in remembered.items():
        when = iso_utc(limit.chosen_at_s)[:19].replace("T", " ") if limit.chosen_at_s is not None else "-"
        how = f"{limit.selector or '-'}" + (f", eta {limit.eta:g}" if limit.eta is not None else "")
        rows.append(
            [
                key,
                number(limit.chosen.power_limit_w, 0),
                number(limit.chosen.time_s, 4),
                number(limit.chosen.energy_j, 2),
                str(len(limit.profile)),
                how,
                when,
            ]
        )
    return rows


def job_page(job: JobHistory) -> str:
    """One job's page: its recurring job (settings, the bandit's state, batch sizes, costs), limits, runs.

    A job that is not a recurring job (a `job=` of tuned runs) has the power limits remembered for it and its
    runs in the history only.
    """
    recurring = job.recurring
    context: dict[str, Any] = {"settings": [], "bandit": [], "summary": None, "stored_runs": [], "charts": []}
    if recurring is not None:
        spec = recurring.spec
        reach = ">=" if spec.metric_mode is MetricMode.MAX else "<="
        target = f"{reach} {spec.target_metric:g} within {spec.max_epochs} epochs"
        context["settings"] = [
            Fact("target", target),
            Fact("batch sizes", ", ".join(str(b) for b in spec.batch_sizes) + f" (default {spec.default_batch_size})"),
            Fact("cost", f"eta {spec.eta:g} x energy + (1 - eta) x {spec.max_power_w:g} W x time; beta {spec.beta:g}"),
        ]
        context["bandit"] = bandit_state(spec, recurring.runs)
        context["summary"] = recurring.summary
        context["stored_runs"] = recurring.runs
        figures = charts.job_figures(recurring.summary, charts.job_runs_points(recurring.runs), simulated=job.simulated)
        context["charts"] = [chart(fig, f"job-chart-{i}") for i, fig in enumerate(figures)]
    return render(
        "job.html",
        SERVED,
        with_charts=recurring is not None,
        title=f"{'Recurring job' if recurring is not None else 'Job'} {job.name}",
        simulated=job.simulated,
        remembered=remembered_rows(job.remembered),
        runs=table_rows(job.runs),
        old_saving=OLD_SAVING if any(r.payback is None and r.saving_j is not None for r in job.runs) else None,
        headings=[label for _, label in RUN_COLUMNS] + [EMISSIONS_HEADING],
        classes=column_classes(),
        number=number,
        **context,
    )


# -- a pipeline frontier ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FrontierView:
    """A frontier to show, the plan chosen from it, and where they come from."""

    frontier: Frontier
    choice: Choice | None
    frontier_file: str
    plan_file: str | None = None


def load_frontier(frontier_path: str, plan_path: str | None = None) -> FrontierView:
    """Read FRONTIER.json and, if given, the PLAN.json chosen from it (else the no-slowdown plan is shown).

    The plan is found again on the frontier the way `wattwise plan` chose it (no slowdown, or for the
    straggler time it names), and must be that point's plan.

    Raises:
        UsageError: a file is missing or damaged, or the plan was not chosen from this frontier.
    """
    from wattwise.pipeline.files import check_plan_document, read_frontier_json
    from wattwise.pipeline.plan import choose_for_straggler, choose_intrinsic

    frontier = read_frontier_json(frontier_path)
    if plan_path is None:
        try:
            choice: Choice | None = choose_intrinsic(frontier)
        except UsageError:
            choice = None
        return FrontierView(frontier, choice, frontier_path)
    where = f"--plan {plan_path}"
    try:
        data = json.loads(Path(plan_path).read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"{where}: cannot be read ({err.strerror}); pass the PLAN.json wattwise plan wrote") from None
    except ValueError as err:
        raise UsageError(f"{where}: not JSON ({err}); pass the PLAN.json wattwise plan wrote") from None
    plan = check_plan_document(data, where)
    if data.get("mode") == PlanMode.STRAGGLER:
        time_s = data.get("iteration_time_s")
        if not isinstance(time_s, int | float) or isinstance(time_s, bool):
            raise UsageError(f"{where}: iteration_time_s must be the straggler's time in seconds (got {time_s!r})")
        choice = choose_for_straggler(frontier, float(time_s))
    else:
        choice = choose_intrinsic(frontier)
    if choice.entry.plan != plan:
        raise UsageError(
            f"{where} was not chosen from {frontier_path}; pass the FRONTIER.json it was planned from "
            "(or plan again: wattwise plan FRONTIER.json --out PLAN.json)"
        )
    return FrontierView(frontier, choice, frontier_path, plan_path)


def frontier_page(view: FrontierView | None) -> str:
    """A pipeline's frontier with its chosen plan (a heat map of each instruction's frequency), or how to get one."""
    if view is None:
        return render(
            "frontier.html", SERVED, with_charts=False, title="Pipeline frontier", view=None, facts=[], charts=[]
        )
    f, choice = view.frontier, view.choice
    source = Path(view.frontier_file).name
    facts = [
        Fact("frontier", view.frontier_file),
        Fact("pipeline", f"{f.stages} stages, {f.microbatches} microbatches, {f.schedule}, solver {f.solver}"),
        Fact("points", str(len(f.points))),
        Fact("power of a blocked GPU", watts(f.p_blocking_w)),
        Fact(
            "every GPU at its maximum frequency",
            f"{seconds(f.max_frequency_time_s)}, {joules(f.max_frequency_energy_j)}",
        ),
    ]
    out = [chart(charts.frontier_figure(f, choice, source=source), "frontier-chart")]
    if choice is not None:
        assert choice.entry.plan is not None
        mode = (
            "no slowdown" if choice.mode == PlanMode.INTRINSIC else f"straggler at {seconds(choice.iteration_time_s)}"
        )
        facts += [
            Fact("plan", view.plan_file or "the no-slowdown plan (give --plan PLAN.json to show another)"),
            Fact("chosen for", mode),
            Fact("chosen plan", f"{seconds(choice.entry.time_s)}, {joules(choice.entry.energy_j)} per iteration"),
            Fact("saving", f"{choice.saving:.2%} less energy than the maximum frequency, {choice.slowdown:+.2%} time"),
        ]
        frequencies = [[step.planned_mhz() for step in stage] for stage in choice.entry.plan]
        labels = [[f"{step.instruction[0].upper()}{step.microbatch}" for step in stage] for stage in choice.entry.plan]
        out.append(
            chart(
                charts.plan_figure(
                    frequencies, labels, title=f"Chosen plan: SM frequency of each instruction ({source})"
                ),
                "plan-chart",
            )
        )
    return render("frontier.html", SERVED, title="Pipeline frontier", view=view, facts=facts, charts=out)


def error_page(status: int, message: str) -> str:
    """A page that says what was wrong with the request, and where to go."""
    return render("error.html", SERVED, with_charts=False, title=f"{status}", message=message)
