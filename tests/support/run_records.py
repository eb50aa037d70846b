"""A finished run's folder, written as wattwise writes it, for tests of what is read from one (statements,
pages): a tuned, carbon-aware two-GPU run, any field replaced."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from wattwise.profile import Payback, ProfileEntry
from wattwise.record.files import power_rows, write_run_dir
from wattwise.record.summary import (
    CarbonAwareSummary,
    NonTrainingTime,
    PowerLimitSummary,
    RunSettings,
    RunSummary,
    TuningSummary,
)

#: The limit the run chose from its profile of two.
TUNED = PowerLimitSummary(
    mode="tune",
    selector="cost",
    eta=0.5,
    max_slowdown=0.1,
    chosen_power_limit_w=175.0,
    profile=(ProfileEntry(300.0, 0.05, 14.0), ProfileEntry(175.0, 0.06, 10.2)),
    baseline_energy_j=30_000.0,
    energy_saved_j=4_999.5,
    baseline_estimated=True,
    tuning=TuningSummary(finished=True, profiled=(300.0, 175.0), steps_at_chosen=380),
)

#: What `TUNED`'s choice gained and what its tuning cost: 3.8 J less a step at 175 W, 20 tuning steps that
#: took 12 J and 0.1 s more than the highest limit, and 380 steps at 175 W: paid back after 25.
PAYBACK = Payback(
    energy_per_step_saved_j=3.8,
    energy_per_step_saved_uncertainty_j=0.4,
    time_per_step_added_s=0.01,
    energy_saved_fraction=3.8 / 14.0,
    time_added_fraction=0.2,
    tuning_steps=20,
    tuning_energy_j=12.0,
    tuning_time_s=0.1,
    steps_at_chosen=380,
    run_energy_saved_j=380 * 3.8 - 12.0,
    run_energy_saved_uncertainty_j=152.0,
    run_time_added_s=380 * 0.01 + 0.1,
    objective="cost",
    objective_per_step_saved=1.2,
    tuning_objective=30.0,
    run_objective_saved=380 * 1.2 - 30.0,
    break_even_steps=25,
)
#: `TUNED` with its payback, as a run whose tuning finished writes it.
TUNED_PAID = replace(TUNED, payback=PAYBACK)


def tuned_summary(**replaced: Any) -> RunSummary:
    """A simulated two-GPU run of 100 s that tuned its power limit and followed the grid's intensity."""
    fields: dict[str, Any] = {
        "status": "completed",
        "simulated": True,
        "backend": "simulated",
        "framework": "lightning",
        "job": "bert",
        "world_size": 2,
        "start_time": "2026-01-01T00:00:00+00:00",
        "end_time": "2026-01-01T00:01:40+00:00",
        "time_s": 100.0,
        "energy_j": 25_000.0,
        "energy_per_device_j": {"rank0/gpu0": 12_000.0, "rank1/gpu0": 13_000.0},
        "steps": 400,
        "power_limit": TUNED,
        "settings": RunSettings(power_limit_w=175.0),
        "carbon_aware": CarbonAwareSummary(300.0, 900.0, "grid.csv"),
        "non_training": {"validation": NonTrainingTime(12.5, 2_500.0, 4)},
    }
    return RunSummary(**{**fields, **replaced})


def write_tuned_run(folder: Path, **replaced: Any) -> Path:
    """`tuned_summary(**replaced)` written to `folder` with a power timeline of two samples; returns `folder`."""
    start_s = 1_767_225_600.0
    rows = power_rows(
        [
            (start_s + 0.5, {"rank0/gpu0": 120.0, "rank1/gpu0": 130.0}),
            (start_s + 1.5, {"rank0/gpu0": 125.0, "rank1/gpu0": 135.0}),
        ]
    )
    write_run_dir(folder, tuned_summary(**replaced), rows)
    return folder
