"""Plots of a run: power over time per device with the applied settings and pauses marked, energy per epoch.

Times are seconds since the start for runs up to ten minutes, minutes past them. The spans that were not
training (validation, checkpoints: the `paused` windows of `windows.csv`) are shaded.

matplotlib is imported here only, lazily (the `plots` extra), and through its object-oriented
`Figure` API, so plotting never changes the process's pyplot state or backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wattwise.errors import UsageError
from wattwise.record.files import PAUSE_WINDOW, RunDir
from wattwise.record.summary import RunSummary
from wattwise.safe_files import output_dir, replace_binary
from wattwise.vocabulary import SettingName

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

POWER_PNG = "power.png"
EPOCHS_PNG = "energy_per_epoch.png"
#: Power-limit values are written only at changes at least this fraction of the run apart (no overlap).
_LABEL_SPACING = 0.06
#: Runs longer than this are drawn in minutes; shorter ones in seconds.
MINUTES_PAST_S = 600.0


@dataclass(frozen=True)
class TimeAxis:
    """How a run's times are drawn: seconds since its start, or minutes for runs past ten minutes."""

    start_s: float
    unit_s: float
    label: str

    @classmethod
    def of(cls, summary: RunSummary) -> TimeAxis:
        """The axis of a run: seconds up to `MINUTES_PAST_S`, minutes past it."""
        if summary.time_s > MINUTES_PAST_S:
            return cls(summary.start_s, 60.0, "time since start (min)")
        return cls(summary.start_s, 1.0, "time since start (s)")

    def at(self, t_s: float) -> float:
        """Where the unix time `t_s` falls on the axis."""
        return (t_s - self.start_s) / self.unit_s


def plot_run(run: RunDir, out_dir: Path, *, dpi: int = 100) -> list[Path]:
    """Write the power plot (when `power.csv` exists) and the per-epoch plot (when epochs exist)."""
    output_dir(out_dir, flag="--plot")
    written = []
    if run.traces:
        written.append(_save(power_figure(run), out_dir / POWER_PNG, dpi))
    if run.summary.epochs:
        written.append(_save(epoch_figure(run), out_dir / EPOCHS_PNG, dpi))
    return written


def power_figure(run: RunDir) -> Figure:
    """Power (W) of each device against time since the start; setting changes and pauses marked."""
    figure_class = _figure_class()
    s = run.summary
    axis = TimeAxis.of(s)
    fig = figure_class(figsize=(8, 3.6), layout="constrained")
    ax = fig.add_subplot()
    for trace in run.traces or ():
        ax.plot(
            (trace.timestamps_s - axis.start_s) / axis.unit_s,
            trace.power_w,
            linewidth=0.5,
            alpha=0.8,
            label=trace.device,
        )
    _mark_power_limits(ax, run, axis)
    _mark_other_settings(ax, run, axis)
    _mark_pauses(ax, run, axis)
    ax.set_xlabel(axis.label)
    ax.set_ylabel("power (W)")
    ax.set_title(_title("Power per device", run))
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _mark_power_limits(ax: Axes, run: RunDir, axis: TimeAxis) -> None:
    """The applied power limit of each device as a step line, its value written at well-spaced changes."""
    s = run.summary
    by_device: dict[str, list[tuple[float, float]]] = {}
    for event in s.settings_timeline:
        if event.setting == SettingName.POWER_LIMIT and isinstance(event.value, int | float):
            by_device.setdefault(event.device, []).append((axis.at(event.timestamp_s), event.value))
    end = axis.at(s.end_s)
    drawn: set[tuple[tuple[float, float], ...]] = set()
    for changes in by_device.values():
        steps = tuple(sorted(changes))
        if steps in drawn:  # devices with the same schedule share one line
            continue
        label = "power limit" if not drawn else None
        drawn.add(steps)
        xs = [x for x, _ in steps] + [end]
        ys = [y for _, y in steps] + [steps[-1][1]]
        ax.step(xs, ys, where="post", color="black", linestyle="--", linewidth=1.0, label=label)
        last_x = -float("inf")
        for i, (x, y) in enumerate(steps):
            if x - last_x >= _LABEL_SPACING * end or i == len(steps) - 1:
                ax.annotate(f"{y:g} W", (x, y), textcoords="offset points", xytext=(2, 3), fontsize=7)
                last_x = x


def _mark_other_settings(ax: Axes, run: RunDir, axis: TimeAxis) -> None:
    """Settings other than the power limit (batch size, frequency plan) as labelled vertical lines."""
    s = run.summary
    changes: dict[float, set[str]] = {}
    for event in s.settings_timeline:
        if event.setting != SettingName.POWER_LIMIT:
            changes.setdefault(event.timestamp_s, set()).add(f"{event.setting}={_value(event.value)}")
    top = ax.get_ylim()[1]
    for t_s, labels in sorted(changes.items()):
        x = axis.at(t_s)
        ax.axvline(x, color="0.35", linestyle=":", linewidth=0.8)
        ax.text(x, top, " " + ", ".join(sorted(labels)), rotation=90, va="top", ha="left", fontsize=7)


def _mark_pauses(ax: Axes, run: RunDir, axis: TimeAxis) -> None:
    """The spans that were not training (validation, checkpoints), shaded, with one legend entry."""
    kinds = ", ".join(sorted(run.summary.non_training)) or "validation, checkpoint"
    label: str | None = f"not training ({kinds})"
    for window in run.windows():
        if window.window_name == PAUSE_WINDOW:
            start = axis.at(window.start_time)
            ax.axvspan(start, start + window.time_s / axis.unit_s, color="0.5", alpha=0.25, linewidth=0, label=label)
            label = None


def epoch_figure(run: RunDir) -> Figure:
    """Energy (kJ) of each epoch."""
    figure_class = _figure_class()
    epochs = run.summary.epochs
    fig = figure_class(figsize=(5, 3), layout="constrained")
    ax = fig.add_subplot()
    ax.bar([str(e.epoch) for e in epochs], [e.energy_j / 1000.0 for e in epochs], color="tab:green")
    ax.set_xlabel("epoch")
    ax.set_ylabel("energy (kJ)")
    ax.set_title(_title("Energy per epoch", run))
    return fig


def _figure_class() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib: pip install matplotlib (or, in a clone of wattwise, pip install '.[plots]')"
        ) from None
    return Figure


def _save(fig: Figure, path: Path, dpi: int) -> Path:
    # Through a temporary beside the target: a link planted at `path` is replaced, never followed.
    replace_binary(path, lambda fh: fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", dpi=dpi))
    return path


def _title(what: str, run: RunDir) -> str:
    host = f" on {run.summary.hostname}" if run.summary.hostname else ""
    return f"{what}{host}" + (" (SIMULATED)" if run.summary.simulated else "")


def _value(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
