"""Plots of a frontier and of one iteration's timeline per stage, coloured by power (Perseus Figure 1).

matplotlib is optional (the `plots` extra): it is imported only when a plot is drawn, and a clear
`UsageError` says how to install it when it is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wattwise.errors import UsageError
from wattwise.pipeline.dag import IntArray
from wattwise.pipeline.plan import Frontier, choice_from_plan, choose_intrinsic
from wattwise.pipeline.problem import PlanningProblem
from wattwise.safe_files import replace_binary


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(
            "plots need matplotlib: pip install matplotlib (or, in a clone of wattwise, pip install '.[plots]')"
        ) from None
    return plt


def timeline(problem: PlanningProblem, choice: IntArray) -> tuple[IntArray, np.ndarray, np.ndarray, np.ndarray]:
    """Per node of one iteration run as early as possible: stage, start (s), duration (s), power (W)."""
    durations = problem.option_time_s[choice]
    starts = problem.dag.finish_times(durations) - durations
    power = problem.option_energy_j[choice] / durations
    return problem.dag.stage_of, starts, durations, power


def frontier_title(problem: PlanningProblem, frontier: Frontier) -> str:
    """Whose frontier it is: the profile's file name (when it came from one), its stages, microbatches, schedule."""
    shape = f"{frontier.stages} stages x {frontier.microbatches} microbatches ({frontier.schedule})"
    source = problem.profile.source
    if not source or source.startswith("<"):  # a profile built in memory has no name of its own
        return f"Time-energy frontier: {shape}"
    return f"Time-energy frontier of profile {Path(source).name}: {shape}"


def plot_frontier(
    problem: PlanningProblem,
    frontier: Frontier,
    path: str | Path,
    *,
    reference: Sequence[tuple[float, float]] | None = None,
    title: str = "",
    measured: Sequence[tuple[str, float, float]] = (),
) -> None:
    """Draw one figure of a frontier and its no-slowdown plan.

    The frontier (with `reference` points if given, and `measured` points: (label, iteration time s,
    energy J) of plans run on GPUs, beside the planned ones), then the timelines of the
    all-maximum-frequency plan and of the intrinsic choice, coloured by power. The title (`title`, else
    `frontier_title`: the profile's file name and the pipeline's shape) is also the image's `Title`
    metadata (PNG, SVG, PDF).
    """
    plt = _pyplot()
    plans: list[tuple[str, IntArray]] = [("all maximum frequency", problem.max_frequency_choice())]
    try:
        chosen = choose_intrinsic(frontier)
    except UsageError:
        chosen = None
    if chosen is not None and chosen.entry.plan is not None:
        label = f"least energy, no slowdown ({chosen.saving:.1%} less energy)"
        plans.append((label, choice_from_plan(problem, chosen.entry.plan)))

    fig, axes = plt.subplots(1 + len(plans), 1, figsize=(11, 3.2 * (1 + len(plans))), constrained_layout=True)
    ax = axes[0]
    times = [p.time_s for p in frontier.points]
    energies = [p.energy_j for p in frontier.points]
    ax.plot(times, energies, ".-", ms=2, lw=0.8, label=f"wattwise ({frontier.solver}), real plans")
    if reference:
        ax.plot(
            [t for t, _ in reference], [e for _, e in reference], "-", lw=0.8, alpha=0.7, label="reference frontier"
        )
    ax.plot([frontier.max_frequency_time_s], [frontier.max_frequency_energy_j], "k^", label="all maximum frequency")
    if chosen is not None:
        ax.plot([chosen.entry.time_s], [chosen.entry.energy_j], "r*", ms=10, label="intrinsic choice")
    for (label, time_s, energy_j), marker in zip(measured, ("ms", "kD", "gP", "cX"), strict=False):
        ax.plot([time_s], [energy_j], marker, ms=7, mfc="none", label=label)
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("energy per iteration (J)")
    title = title or frontier_title(problem, frontier)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    lines = [timeline(problem, choice) for _, choice in plans]
    low = min(problem.p_blocking_w, *(float(p.min()) for *_, p in lines))
    high = max(float(p.max()) for *_, p in lines)
    norm = plt.Normalize(vmin=low, vmax=high)
    cmap = plt.get_cmap("RdYlBu_r")
    end_s = max(float((s + d).max()) for _, s, d, _ in lines)
    for ax, (label, _), (stage_of, starts, durations, power) in zip(axes[1:], plans, lines, strict=True):
        iteration_s = float((starts + durations).max())
        for stage in range(problem.dag.num_stages):
            # The GPU is powered all iteration long: background at the blocking power.
            ax.broken_barh([(0.0, iteration_s)], (stage - 0.4, 0.8), facecolors=cmap(norm(problem.p_blocking_w)))
            mine = stage_of == stage
            ax.broken_barh(
                list(zip(starts[mine], durations[mine], strict=True)),
                (stage - 0.4, 0.8),
                facecolors=cmap(norm(power[mine])),
                edgecolors="black",
                linewidth=0.2,
            )
        ax.set_xlim(0, end_s * 1.01)
        ax.set_ylim(problem.dag.num_stages - 0.5, -0.5)
        ax.set_ylabel("stage")
        ax.set_xlabel("time (s)")
        ax.set_title(f"{label}: {iteration_s:.4g} s")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes[1:], label="power (W)")
    try:
        # Through a temporary beside the target: a link planted at `path` is replaced, never followed.
        kind = Path(path).suffix.lstrip(".").lower() or "png"
        metadata = {"Title": title} if kind in ("png", "svg", "pdf") else None
        replace_binary(path, lambda fh: fig.savefig(fh, format=kind, dpi=120, metadata=metadata))
    except OSError as err:
        raise UsageError(f"{path}: cannot write the plot ({err.strerror})") from None
    finally:
        plt.close(fig)
