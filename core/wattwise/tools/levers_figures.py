"""The figures each lever check leaves in `acceptance.json`, typed: its rows and the whole of what it measured.

They cross a file (a rerun into the same folder reads them back, and `tuning_vs_sweep` reads the sweep's),
so each is a `TypedDict` of JSON values: SI units in the names, None where nothing was measured.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NotRequired, TypedDict


@dataclasses.dataclass(frozen=True)
class CapWindow:
    """One cap's measurement window: per training step, its time (s) and energy (J) and how precise that is."""

    cap_w: float
    time_s: float
    energy_j: float
    steps: int
    energy_uncertainty_j: float = 0.0
    #: The NVML workload power profile requested during the window (None: none, a plain cap).
    profile: str | None = None


class CapRow(TypedDict):
    """One cap of the sweep, per training step, relative to the default limit's window."""

    cap_w: float
    cap_fraction: float
    step_time_s: float
    step_energy_j: float
    step_energy_uncertainty_j: float
    avg_power_w: float
    time_ratio: float
    energy_ratio: float
    energy_ratio_uncertainty: float
    steps: int
    #: The workload power profile of the window (absent: a plain cap).
    profile: NotRequired[str]


class CapSweepFigures(TypedDict):
    """What `cap_sweep` measured: the caps' rows beside the paper's, and the sweep's set-up."""

    gpu: str
    simulated: bool
    model: str
    default_w: float
    min_w: float
    max_w: float
    window_s: float
    energy_update_period_s: float
    rows: list[CapRow]
    #: The paper's row beside the sweep's: `PaperCapRow`'s fields.
    paper: dict[str, Any]
    workload_power_profiles: str
    profile_rows: list[CapRow]


class ProfileEntry(TypedDict):
    """One limit of a tuning run's own profile, per step (summary.json's `power_limit.profile`)."""

    power_limit_w: float
    time_s: float
    energy_j: float


class TuningRow(TypedDict):
    """One tuning run: the limit it chose, against the default limit and against the sweep's best cap."""

    eta: float
    repeat: int
    chosen_w: float | None
    sweep_best_w: float
    time_ratio_vs_default: NotRequired[float]
    energy_ratio_vs_default: NotRequired[float]
    #: The Zeus cost per step of the chosen limit over that of the sweep's best cap, both as the sweep measured.
    cost_vs_best: NotRequired[float]
    energy_vs_best: NotRequired[float]
    time_vs_best: NotRequired[float]
    #: The run's own profile, and its summary's tuning outcome (`tuning_vs_sweep` adds them).
    profile: NotRequired[list[ProfileEntry]]
    tuning: NotRequired[object]


class TuningFigures(TypedDict):
    """What `tuning_vs_sweep` measured: each run's row, and per eta whether the choice held."""

    gpu: str
    simulated: bool
    etas: list[float]
    step_w: float
    runs: list[TuningRow]
    holds: dict[str, str]
    claim: str


class IterationFigures(TypedDict):
    """One pipeline iteration under the plan and at the maximum clock: time (s), energy (J), and their ratio."""

    plan_time_s: float
    plan_energy_j: float
    max_time_s: float
    max_energy_j: float
    saving: float | None
    slowdown: float | None


class PipelineFigures(TypedDict):
    """What `pipeline_measured` measured: the plan's iteration as predicted and as run, and where its files are."""

    gpu: str
    simulated: bool
    stages: int
    microbatches: int
    schedule: str
    clocks_mhz: list[int]
    p_blocking_w: float
    unit_time_s: float
    window_s: float
    run_s: float
    profile_csv: str
    frontier: str
    plan: str
    composition: str
    predicted: IterationFigures
    measured: IterationFigures
    claim: str
    plot: str | None
