"""A finished run's folder, written as wattwise writes it, for tests of what is read from one (statements,
pages): a tuned, carbon-aware two-GPU run, any field replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wattwise.profile import ProfileEntry
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
