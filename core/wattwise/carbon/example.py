"""Build run directories in the run record's format (`wattwise.record.summary`), for tests and the README's example.

`sampled_run` samples per-device power functions into a `power.csv` timeline and a matching summary
(energy by trapezoids over the samples, times `counter_scale` to mimic an exact energy counter that
differs from the sampled integral). `write_example` writes the README's example: a simulated 3-hour run
on two GPUs with a power-limit tuning phase, plus hourly PUE, intensity and price series. Run
`python -m wattwise.carbon.example DIR` to get it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from wattwise.carbon.integrate import DeviceTrace
from wattwise.profile import ProfileEntry
from wattwise.record.files import PowerRow, write_run_dir
from wattwise.record.summary import EpochEnergy, PowerLimitSummary, RunSettings, RunSummary, SettingEvent, iso_utc
from wattwise.safe_files import write_text
from wattwise.vocabulary import Framework


@dataclass(frozen=True)
class ExampleFiles:
    """Paths `write_example` wrote."""

    run_dir: Path
    pue_csv: Path
    intensity_csv: Path
    price_csv: Path


def write_series_csv(path: Path, start_s: float, step_s: float, values: Iterable[float]) -> Path:
    """Write a `timestamp,value` series: `values` every `step_s` seconds from `start_s` (UTC)."""
    rows = "".join(f"{iso_utc(start_s + k * step_s)},{v}\n" for k, v in enumerate(values))
    write_text(path, "timestamp,value\n" + rows, user_named=True)
    return path


def sampled_run(
    start_s: float,
    duration_s: float,
    power_w: Mapping[str, Callable[[float], float]],
    *,
    sample_period_s: float = 1.0,
    epochs: int = 1,
    counter_scale: float = 1.0,
    simulated: bool = True,
    **overrides: Any,
) -> tuple[RunSummary, list[PowerRow]]:
    """A summary and power rows for devices whose power is `power_w[device](seconds since start)`.

    `overrides` (e.g. `power_limit`, `settings`, `hostname`) replace the summary's fields.
    """
    offsets_s = np.arange(0.0, duration_s + sample_period_s / 2, sample_period_s)
    epoch_edges_s = start_s + np.linspace(0.0, duration_s, epochs + 1)
    rows: list[PowerRow] = []
    per_device_j: dict[str, float] = {}
    per_epoch_j = np.zeros(epochs)
    for device, power in power_w.items():
        trace = DeviceTrace(device, start_s + offsets_s, np.array([power(float(x)) for x in offsets_s]))
        per_epoch_j += np.diff(trace.cumulative_energy_j(epoch_edges_s)) * counter_scale
        per_device_j[device] = float(trace.cumulative_energy_j(trace.timestamps_s[-1:])[0]) * counter_scale
        rows += [PowerRow(float(t), device, float(w)) for t, w in zip(trace.timestamps_s, trace.power_w, strict=True)]
    rows.sort(key=lambda r: (r.timestamp_s, r.device, r.power_w))
    summary = RunSummary(
        simulated=simulated,
        backend="simulated" if simulated else "nvml",
        framework=Framework.LIGHTNING,
        hostname="node1",
        start_time=iso_utc(start_s),
        end_time=iso_utc(start_s + duration_s),
        time_s=duration_s,
        energy_j=sum(per_device_j.values()),
        energy_per_device_j=per_device_j,
        steps=1000,
        epochs=tuple(EpochEnergy(k, duration_s / epochs, float(e)) for k, e in enumerate(per_epoch_j)),
    )
    return dataclasses.replace(summary, **overrides), rows


#: The README example: 2026-11-21 21:00 UTC, three hours, two simulated GPUs.
EXAMPLE_START_S = datetime(2026, 11, 21, 21, 0, tzinfo=timezone.utc).timestamp()
EXAMPLE_DURATION_S = 3 * 3600.0
#: Tuning phase: each profiled limit held for 2 minutes, then the chosen one.
EXAMPLE_PROFILE_W = (300.0, 250.0, 200.0, 175.0, 150.0)
EXAMPLE_CHOSEN_W = 175.0
_PHASE_S = 120.0
#: Hourly series from 18:00 UTC: grid intensity falling through the night, PUE easing as it cools.
_EXAMPLE_INTENSITY = (520.0, 505.0, 480.0, 450.0, 410.0, 360.0, 300.0, 260.0, 240.0, 250.0, 300.0, 380.0)
_EXAMPLE_PUE = (1.18, 1.16, 1.15, 1.13, 1.12, 1.11, 1.10, 1.10, 1.09, 1.09, 1.10, 1.12)
_EXAMPLE_PRICE = (0.31, 0.29, 0.26, 0.22, 0.19, 0.17, 0.15, 0.14, 0.14, 0.15, 0.18, 0.24)


def _example_limit_w(offset_s: float) -> float:
    phase = int(offset_s // _PHASE_S)
    return EXAMPLE_PROFILE_W[phase] if phase < len(EXAMPLE_PROFILE_W) else EXAMPLE_CHOSEN_W


def _example_power(seed: int) -> Callable[[float], float]:
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 4.0, size=int(EXAMPLE_DURATION_S) + 2)

    def power_w(offset_s: float) -> float:
        limit_w = _example_limit_w(offset_s)
        # Draw sits just under the limit, dipping each 10-minute validation pass.
        busy = 0.55 if (offset_s % 600.0) < 30.0 and offset_s > 0 else 0.97
        return float(np.clip(limit_w * busy + noise[int(offset_s)], 60.0, limit_w + 3.0))

    return power_w


def write_example(directory: Path) -> ExampleFiles:
    """Write the README's example run (`directory/run`) and its hourly PUE, intensity and price CSVs."""
    devices = ("rank0/gpu0", "rank1/gpu0")
    events = tuple(
        SettingEvent(EXAMPLE_START_S + k * _PHASE_S, d, "power_limit_w", w)
        for k, w in enumerate((*EXAMPLE_PROFILE_W, EXAMPLE_CHOSEN_W))
        for d in devices
    )
    profile = tuple(
        ProfileEntry(w, t, e)
        for w, t, e in (
            (300.0, 0.050, 14.0),
            (250.0, 0.052, 12.6),
            (200.0, 0.056, 10.9),
            (175.0, 0.060, 10.2),
            (150.0, 0.071, 10.4),
        )
    )
    summary, samples = sampled_run(
        EXAMPLE_START_S,
        EXAMPLE_DURATION_S,
        {d: _example_power(seed) for seed, d in enumerate(devices)},
        epochs=3,
        counter_scale=1.004,
        hostname="node1",
        settings=RunSettings(power_limit_w=EXAMPLE_CHOSEN_W, batch_size=64),
        settings_timeline=events,
    )
    # What the same run would have used at the default (highest) limit, from the profile's ratio.
    baseline_j = summary.energy_j * 14.0 / 10.2
    summary = dataclasses.replace(
        summary,
        power_limit=PowerLimitSummary(
            mode="tune",
            selector="cost",
            eta=0.5,
            chosen_power_limit_w=EXAMPLE_CHOSEN_W,
            profile=profile,
            baseline_energy_j=baseline_j,
            energy_saved_j=baseline_j - summary.energy_j,
        ),
    )
    run_dir = write_run_dir(directory / "run", summary, samples)
    series_start_s = EXAMPLE_START_S - 3 * 3600.0
    paths = [
        write_series_csv(directory / f"{name}.csv", series_start_s, 3600.0, values)
        for name, values in (("pue", _EXAMPLE_PUE), ("intensity", _EXAMPLE_INTENSITY), ("price", _EXAMPLE_PRICE))
    ]
    return ExampleFiles(run_dir, *paths)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("wattwise-example")
    written = write_example(target)
    print(f"run directory: {written.run_dir}")
    print(f"series: {written.pue_csv} {written.intensity_csv} {written.price_csv}")
