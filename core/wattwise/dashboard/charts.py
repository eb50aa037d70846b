"""The dashboard's charts: Plotly figures built from what the record, the store and the planner hold.

Each function takes data already read and returns a `plotly.graph_objects.Figure`; none reads a file. Data
go in as lists (not NumPy arrays, which Plotly 6 and later send as typed arrays), so a page's charts hold
their points as plain numbers. A
chart of simulated figures says so twice: "(SIMULATED)" in its title and a faint "SIMULATED" across its
plot, so a screenshot cut from the page still says it. Times on a run's charts are seconds since the run
started (minutes past ten minutes).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from wattwise.extras import require
from wattwise.record.files import PAUSE_WINDOW, RunDir, WindowRow
from wattwise.record.plot import TimeAxis
from wattwise.record.summary import PowerLimitSummary, RunSummary
from wattwise.vocabulary import RecurringRunState, SettingName

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from wattwise.pipeline.plan import Choice, Frontier
    from wattwise.recurring.summary import JobSummary

#: What marks simulated figures, in titles and across the plot.
SIMULATED = "SIMULATED"
#: The most power samples drawn per device; a longer trace is drawn as the low and high of each bucket.
MAX_POINTS_PER_DEVICE = 20_000
#: Window names of `windows.csv` drawn as spans on the power chart, with their legend label and colour.
SPANS = {
    PAUSE_WINDOW: ("not training (validation, checkpoint)", "rgba(120, 120, 120, 0.25)"),
    "power_limit_profile": ("tuning: profiling power limits", "rgba(255, 165, 0, 0.15)"),
}
#: Pauses by kind (`WindowRow.kind`): each its own shade and legend entry; another kind is named as it is.
PAUSE_SPANS = {
    "validation": ("validation", "rgba(31, 119, 180, 0.18)"),
    "checkpoint": ("checkpoint", "rgba(148, 103, 189, 0.30)"),
}
#: The shade of a pause of any other kind.
OTHER_PAUSE_COLOUR = "rgba(120, 120, 120, 0.25)"


def plain(text: str) -> str:
    """`text` as a chart shows it: as text, never as markup.

    Plotly draws a subset of HTML in every text it is given (titles, legend names, tick labels, hover text,
    annotations): `<a href>` as a link, `<b>`, `<br>`, `<span style>`. A string that comes from a run's
    files (a device name, a pause's kind, a selector, a file's name) is therefore escaped before it reaches
    a figure; Plotly turns the entities back into the characters they stand for.
    """
    return html.escape(text, quote=False)


def span_of(window: WindowRow) -> tuple[str, str] | None:
    """The legend label and colour of a window drawn as a span on the power chart; None: not drawn.

    A pause is drawn by its kind ("validation", "checkpoint", any other by its name); a pause from a file
    that does not say its kind keeps the one shade of "not training".
    """
    if window.window_name == PAUSE_WINDOW and window.kind:
        return PAUSE_SPANS.get(window.kind, (plain(window.kind), OTHER_PAUSE_COLOUR))
    return SPANS.get(window.window_name)


#: Runs of one comparison share these colours, in order.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _go() -> Any:
    return require("plotly.graph_objects", "the dashboard", extra="dashboard")


def _layout(fig: go.Figure, title: str, *, simulated: bool, height_px: int = 420) -> go.Figure:
    """The dashboard's look, and the simulated mark when the figures are simulated; `title` is shown as text."""
    fig.update_layout(
        title={"text": f"{plain(title)} ({SIMULATED})" if simulated else plain(title)},
        template="plotly_white",
        height=height_px,
        margin={"l": 60, "r": 30, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.2},
    )
    if simulated:
        fig.add_annotation(
            text=SIMULATED,
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font={"size": 64, "color": "rgba(200, 0, 0, 0.10)"},
        )
    return fig


def _bucketed(t: np.ndarray, p: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `most` points of a trace: all of them, or the lowest and highest sample of each bucket."""
    if len(t) <= most:
        return t, p
    size = -(-len(t) // max(1, most // 2))  # samples per bucket, the last bucket padded
    rows = -(-len(t) // size)
    padded = np.full(rows * size, np.nan)
    padded[: len(p)] = p
    grid = padded.reshape(rows, size)
    first = np.arange(rows) * size
    keep = np.unique(np.concatenate([first + np.nanargmin(grid, axis=1), first + np.nanargmax(grid, axis=1)]))
    return t[keep], p[keep]


def power_limit_steps(summary: RunSummary) -> dict[str, list[tuple[float, float]]]:
    """Each device's applied power limit as (unix time, watts) changes, from the settings timeline."""
    by_device: dict[str, list[tuple[float, float]]] = {}
    for event in summary.settings_timeline:
        if (
            event.setting == SettingName.POWER_LIMIT
            and isinstance(event.value, int | float)
            and not isinstance(event.value, bool)
        ):
            by_device.setdefault(event.device, []).append((event.timestamp_s, float(event.value)))
    return {device: sorted(changes) for device, changes in by_device.items()}


class SpanShape(TypedDict):
    """A shaded span of the power chart, as Plotly's layout takes a shape (`layout.shapes[]`)."""

    type: str
    xref: str
    yref: str
    x0: float
    x1: float
    y0: float
    y1: float
    fillcolor: str
    line: dict[str, float]
    layer: str
    name: str
    legendgroup: str
    showlegend: bool


def span_shapes(windows: Iterable[WindowRow], axis: TimeAxis) -> list[SpanShape]:
    """The shaded spans of the power chart (`span_of`) as one list of shapes, each kind's first in the legend.

    The list is handed to the figure once: adding the spans one at a time (`add_vrect`) re-validates every
    shape already there, a cost that grows with the square of the pauses (minutes for a run of 400).
    """
    shapes: list[SpanShape] = []
    shown: set[str] = set()
    for window in windows:
        span = span_of(window)
        if span is None:
            continue
        label, colour = span
        shapes.append(
            SpanShape(
                type="rect",
                xref="x",
                yref="y domain",
                x0=axis.at(window.start_time),
                x1=axis.at(window.start_time + window.time_s),
                y0=0,
                y1=1,
                fillcolor=colour,
                line={"width": 0},
                layer="below",
                name=label,
                legendgroup=label,
                showlegend=label not in shown,
            )
        )
        shown.add(label)
    return shapes


def power_figure(run: RunDir, windows: Iterable[WindowRow] = ()) -> go.Figure:
    """Power of each device over the run, its power limit as a step line, and the spans that were not training.

    Args:
        run: The run folder as read (`power.csv` gives the power; the settings timeline the limit).
        windows: The run's measurement windows (`RunDir.windows()`): its pauses (validation, checkpoints)
            and its profiling window are drawn as shaded spans.

    Returns:
        The figure; a run without `power.csv` has the limit and the spans only.
    """
    go = _go()
    s = run.summary
    axis = TimeAxis.of(s)
    fig = go.Figure()
    for trace in run.traces or ():
        t, p = _bucketed(trace.timestamps_s, trace.power_w, MAX_POINTS_PER_DEVICE)
        fig.add_trace(
            go.Scatter(
                x=((t - axis.start_s) / axis.unit_s).tolist(),
                y=p.tolist(),
                mode="lines",
                name=f"{plain(trace.device)} power (W)",
            )
        )
    drawn: set[tuple[tuple[float, float], ...]] = set()
    for device, changes in power_limit_steps(s).items():
        steps = tuple(changes)
        if steps in drawn:  # devices on the same schedule share one line
            continue
        drawn.add(steps)
        xs = [axis.at(t_s) for t_s, _ in steps] + [axis.at(s.end_s)]
        ys = [w for _, w in steps] + [steps[-1][1]]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"shape": "hv", "dash": "dash", "color": "black"},
                name=f"power limit (W), {plain(device)}" if len(drawn) > 1 else "power limit (W)",
            )
        )
    fig.update_layout(shapes=span_shapes(windows, axis))
    fig.update_xaxes(title_text=axis.label)
    fig.update_yaxes(title_text="power (W)", rangemode="tozero")
    return _layout(fig, "Power and power limit", simulated=s.simulated)


def profile_figure(limit: PowerLimitSummary, *, simulated: bool) -> go.Figure | None:
    """The tuning profile: time and energy of one step at each limit profiled, the chosen limit marked.

    Returns:
        None when nothing was profiled (a cap, a reused limit, tuning that measured no limit).
    """
    if not limit.profile:
        return None
    make_subplots = require("plotly.subplots", "the dashboard", extra="dashboard").make_subplots
    go = _go()
    entries = sorted(limit.profile, key=lambda e: e.power_limit_w)
    watts = [e.power_limit_w for e in entries]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Scatter(x=watts, y=[e.energy_j for e in entries], mode="lines+markers", name="energy per step (J)"),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=watts,
            y=[e.time_s for e in entries],
            mode="lines+markers",
            name="time per step (s)",
            line={"dash": "dot"},
        ),
        secondary_y=True,
    )
    chosen = limit.chosen_power_limit_w
    if chosen is not None:
        how = f"chosen: {chosen:g} W"
        if limit.selector:
            how += f" by {plain(limit.selector)}" + (f", eta {limit.eta:g}" if limit.eta is not None else "")
        fig.add_vline(x=chosen, line_dash="dash", line_color="green", annotation_text=how)
    fig.update_xaxes(title_text="power limit (W)")
    energy_range = nonnegative_range([e.energy_j for e in entries])
    time_range = nonnegative_range([e.time_s for e in entries])
    fig.update_yaxes(title_text="energy per step (J)", range=energy_range, secondary_y=False)
    fig.update_yaxes(title_text="time per step (s)", range=time_range, secondary_y=True)
    return _layout(fig, "Tuning profile: one step at each power limit", simulated=simulated)


#: The room a profile axis leaves above and below its figures, as a fraction of their span (or of the
#: figure itself when there is one value).
_AXIS_MARGIN = 0.1


def nonnegative_range(values: Sequence[float]) -> list[float]:
    """An axis range that holds `values` (energy or time, never negative) with a margin, from zero or above.

    Plotly's own range around a single point (one limit profiled) reaches below zero.
    """
    low, high = min(values), max(values)
    margin = _AXIS_MARGIN * ((high - low) or abs(high) or 1.0)
    return [max(0.0, low - margin), high + margin]


@dataclass(frozen=True)
class ComparedRun:
    """One run of a comparison: its label, figures and power trace (what `comparison_figures` draws)."""

    label: str
    energy_j: float
    energy_uncertainty_j: float | None
    time_s: float
    simulated: bool
    #: (seconds since the run's start, total power of its devices in W); empty without power.csv.
    power: tuple[np.ndarray, np.ndarray] | None = None


def total_power(run: RunDir) -> tuple[np.ndarray, np.ndarray] | None:
    """The run's devices' power summed, on the union of their sample times, as (s since start, W)."""
    traces = run.traces or ()
    if not traces:
        return None
    times = np.unique(np.concatenate([t.timestamps_s for t in traces]))
    watts = sum(
        (np.interp(times, t.timestamps_s, t.power_w, left=0.0, right=0.0) for t in traces), np.zeros_like(times)
    )
    return times - run.summary.start_s, watts


def comparison_figures(runs: Sequence[ComparedRun]) -> list[go.Figure]:
    """Energy and time of each run side by side (energy with its uncertainty), then their power over time."""
    make_subplots = require("plotly.subplots", "the dashboard", extra="dashboard").make_subplots
    go = _go()
    simulated = any(r.simulated for r in runs)
    colours = [PALETTE[i % len(PALETTE)] for i in range(len(runs))]
    labels = [plain(r.label) for r in runs]
    bars = make_subplots(rows=1, cols=2, subplot_titles=("energy (J)", "time (s)"))
    bars.add_trace(
        go.Bar(
            x=labels,
            y=[r.energy_j for r in runs],
            marker_color=colours,
            error_y={
                "type": "data",
                "array": [r.energy_uncertainty_j or 0.0 for r in runs],
                "visible": any(r.energy_uncertainty_j for r in runs),
            },
            name="energy (J)",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    bars.add_trace(
        go.Bar(x=labels, y=[r.time_s for r in runs], marker_color=colours, name="time (s)", showlegend=False),
        row=1,
        col=2,
    )
    figures = [_layout(bars, "Energy and time", simulated=simulated)]
    powered = [(r, c) for r, c in zip(runs, colours, strict=True) if r.power is not None]
    if powered:
        power = go.Figure()
        for r, colour in powered:
            assert r.power is not None
            t, p = _bucketed(r.power[0], r.power[1], MAX_POINTS_PER_DEVICE)
            power.add_trace(
                go.Scatter(x=t.tolist(), y=p.tolist(), mode="lines", name=plain(r.label), line={"color": colour})
            )
        power.update_xaxes(title_text="time since the run's start (s)")
        power.update_yaxes(title_text="power, all devices (W)", rangemode="tozero")
        figures.append(_layout(power, "Power over time", simulated=simulated))
    return figures


@dataclass(frozen=True)
class JobRunPoint:
    """One finished run of a recurring job, as the job's chart draws it."""

    run_id: int
    batch_size: int
    reached: bool
    cost: float


def job_figures(summary: JobSummary, runs: Sequence[JobRunPoint], *, simulated: bool) -> list[go.Figure]:
    """A recurring job: the cost of each run by batch size, and each batch size's cost per reached run.

    Args:
        summary: The job's summary (`wattwise.recurring.summary.summarize`).
        runs: Its finished runs.
        simulated: Whether its runs ran on a simulated GPU.
    """
    go = _go()
    costs = go.Figure()
    for reached, symbol, label in ((True, "circle", "reached the target"), (False, "x", "stopped or failed")):
        mine = [r for r in runs if r.reached is reached]
        costs.add_trace(
            go.Scatter(
                x=[r.run_id for r in mine],
                y=[r.cost for r in mine],
                mode="markers+text",
                text=[str(r.batch_size) for r in mine],
                textposition="top center",
                marker={"symbol": symbol, "size": 10},
                name=f"{label} (label: batch size)",
            )
        )
    costs.update_xaxes(title_text="run", dtick=1)
    costs.update_yaxes(title_text="cost (J)", rangemode="tozero")
    figures = [_layout(costs, f"Runs of {summary.name}: cost", simulated=simulated)]
    sizes = [b for b in summary.batch_sizes if b.recurrence_cost is not None]
    if sizes:
        means = go.Figure(
            go.Bar(
                x=[str(b.batch_size) for b in sizes],
                y=[b.recurrence_cost for b in sizes],
                marker_color=["green" if b.batch_size == summary.best_batch_size else "#1f77b4" for b in sizes],
                text=[f"{b.reached}/{b.runs} reached" for b in sizes],
                name="cost per reached run (J)",
            )
        )
        means.update_xaxes(title_text="batch size", type="category")
        means.update_yaxes(title_text="cost per reached run (J)", rangemode="tozero")
        figures.append(
            _layout(means, f"Batch sizes: best so far {summary.best_batch_size} (green)", simulated=simulated)
        )
    return figures


def frontier_figure(frontier: Frontier, choice: Choice | None, *, source: str) -> go.Figure:
    """The time-energy frontier of a pipeline, the maximum-frequency plan and the chosen plan marked.

    Args:
        frontier: As `wattwise frontier` wrote it.
        choice: The plan chosen (`wattwise plan`), or None.
        source: Whose profile it is (the frontier file's name), for the title.
    """
    go = _go()
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[p.time_s for p in frontier.points],
            y=[p.energy_j for p in frontier.points],
            mode="lines+markers",
            marker={"size": 4},
            name="frontier: least energy per iteration time",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[frontier.max_frequency_time_s],
            y=[frontier.max_frequency_energy_j],
            mode="markers",
            marker={"size": 12, "symbol": "square", "color": "black"},
            name="every GPU at its maximum frequency",
        )
    )
    if choice is not None:
        fig.add_trace(
            go.Scatter(
                x=[choice.entry.time_s],
                y=[choice.entry.energy_j],
                mode="markers",
                marker={"size": 14, "symbol": "star", "color": "green"},
                name=f"chosen plan ({choice.mode}): {choice.saving:.1%} less energy, {choice.slowdown:+.1%} time",
            )
        )
    fig.update_xaxes(title_text="iteration time (s)")
    fig.update_yaxes(title_text="energy per iteration (J)")
    return _layout(
        fig,
        f"Frontier of {source}: {frontier.stages} stages, {frontier.microbatches} microbatches, {frontier.schedule}",
        simulated=False,
    )


def plan_figure(frequencies_mhz: Sequence[Sequence[int]], labels: Sequence[Sequence[str]], *, title: str) -> go.Figure:
    """A frequency plan as a heat map: one row per stage, its instructions in execution order.

    Args:
        frequencies_mhz: Per stage, the frequency (MHz) of each instruction in execution order.
        labels: Per stage, each instruction's name (`F3`: the forward of microbatch 3).
        title: The chart's title.
    """
    go = _go()
    width = max((len(row) for row in frequencies_mhz), default=0)
    z = [[*row, *([math.nan] * (width - len(row)))] for row in frequencies_mhz]
    text = [[*(plain(label) for label in row), *([""] * (width - len(row)))] for row in labels]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            text=text,
            texttemplate="%{text}" if width <= 48 else None,
            hovertemplate="stage %{y}, %{text}: %{z} MHz<extra></extra>",
            colorscale="Viridis",
            colorbar={"title": {"text": "MHz"}},
        )
    )
    fig.update_xaxes(title_text="instruction, in execution order")
    fig.update_yaxes(title_text="stage", autorange="reversed", dtick=1)
    return _layout(fig, title, simulated=False, height_px=max(260, 60 * len(frequencies_mhz) + 140))


def job_runs_points(runs: Iterable[Any]) -> list[JobRunPoint]:
    """The finished runs of a job's history (the store's run records) with a cost, as chart points."""
    return [
        JobRunPoint(r.run_id, r.batch_size, r.state == RecurringRunState.REACHED, r.cost)
        for r in runs
        if r.state != RecurringRunState.OPEN and r.cost is not None
    ]


def device_limits(summary: RunSummary) -> Mapping[str, float]:
    """The last power limit applied to each device (W), from the settings timeline."""
    return {device: changes[-1][1] for device, changes in power_limit_steps(summary).items()}
