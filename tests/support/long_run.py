"""A long run's folder, written through the record's own writers: days of power samples and many pauses.

What a week-long fit leaves: `power.csv` as the sampler keeps it (at most `MAX_SAMPLES` per device, thinned
evenly), `windows.csv` with a logging window every `log_interval_s`, and `pauses` validation and checkpoint
pauses spread over the run, each a minute long. Used by the tests and the benchmark of the pages and
reports that draw a run (`benchmarks/report_long_run.py`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wattwise.record.files import PowerRow, WindowRow, WindowsLog, write_run_dir
from wattwise.record.summary import RunSummary, SettingEvent, iso_utc

T0_S = 1_796_119_200.0  # 2026-12-01T10:00:00Z
DEVICES = ("rank0/gpu0", "rank1/gpu0")
#: The most samples the power sampler keeps per device (`wattwise.monitor.PowerSampler.MAX_SAMPLES`).
MAX_SAMPLES = 100_000
PAUSE_S = 60.0


def write_long_run(folder: Path, *, days: float = 8.0, pauses: int = 400, log_interval_s: float = 60.0) -> Path:
    """A simulated two-GPU run of `days` days with `pauses` pauses (every fourth a checkpoint); returns `folder`."""
    time_s = days * 86_400.0
    rng = np.random.default_rng(0)
    times = np.linspace(T0_S, T0_S + time_s, MAX_SAMPLES)
    power = [
        PowerRow(float(t), device, float(w))
        for device in DEVICES
        for t, w in zip(times, 200.0 + 40.0 * rng.random(MAX_SAMPLES), strict=True)
    ]
    energy_j = 220.0 * time_s * len(DEVICES)
    summary = RunSummary(
        status="completed",
        simulated=True,
        backend="simulated",
        framework="lightning",
        job="week-long",
        start_time=iso_utc(T0_S),
        end_time=iso_utc(T0_S + time_s),
        time_s=time_s,
        energy_j=energy_j,
        energy_per_device_j={device: energy_j / len(DEVICES) for device in DEVICES},
        energy_uncertainty_j=30.0,
        simulated_driven_by="steps",
        steps=int(time_s / 0.5),
        settings_timeline=tuple(SettingEvent(T0_S + 1.0, device, "power_limit_w", 250.0) for device in DEVICES),
    )
    write_run_dir(folder, summary, power)
    log = WindowsLog(folder / "windows.csv", [f"gpu{i}" for i in range(len(DEVICES))])
    gap_s = time_s / (pauses + 1)
    starts = {round(gap_s * (i + 1), 3): i for i in range(pauses)}
    t_s = 0.0
    while t_s < time_s:
        log.write(WindowRow(T0_S + t_s, "steps", log_interval_s, 1e4, {"gpu0": 5e3, "gpu1": 5e3}, simulated=True))
        t_s += log_interval_s
    for start_s, i in sorted(starts.items()):
        kind = "checkpoint" if i % 4 == 3 else "validation"
        log.write(
            WindowRow(T0_S + start_s, "paused", PAUSE_S, 1e4, {"gpu0": 5e3, "gpu1": 5e3}, simulated=True, kind=kind)
        )
    log.close()
    return folder
