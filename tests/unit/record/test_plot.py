"""The run's plots: the time axis a reader can use (seconds for short runs), and the pauses marked."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.carbon.example import sampled_run
from wattwise.record.files import WindowRow, WindowsLog, read_run_dir, write_run_dir
from wattwise.record.summary import NonTrainingTime

pytest.importorskip("matplotlib")

from wattwise.record.plot import power_figure

T0 = 1_764_000_000.0
DEVICE = "rank0/gpu0"


def _run(folder: Path, duration_s: float, pauses: list[tuple[float, float]]) -> Path:
    """A run of `duration_s` at 200 W whose `windows.csv` holds a pause at each (offset s, length s)."""
    summary, samples = sampled_run(
        T0,
        duration_s,
        {DEVICE: lambda _t: 200.0},
        sample_period_s=duration_s / 60,
        non_training={"validation": NonTrainingTime(time_s=5.0, energy_j=500.0, count=len(pauses))},
    )
    write_run_dir(folder, summary, samples)
    log = WindowsLog(folder / "windows.csv", [DEVICE])
    for offset_s, length_s in pauses:
        log.write(WindowRow(T0 + offset_s, "paused", length_s, 200.0 * length_s, {DEVICE: 200.0 * length_s}))
    log.write(WindowRow(T0, "fit", duration_s, 200.0 * duration_s, {DEVICE: 200.0 * duration_s}))
    log.close()
    return folder


def test_a_short_run_is_drawn_in_seconds_with_its_pauses_shaded(tmp_path: Path) -> None:
    ax = power_figure(read_run_dir(_run(tmp_path / "run", 90.0, [(30.0, 5.0), (60.0, 4.0)]))).axes[0]
    assert ax.get_xlabel() == "time since start (s)"
    assert max(max(line.get_xdata()) for line in ax.get_lines()) == pytest.approx(90.0)
    spans = [p.get_x() for p in ax.patches]  # axvspan's rectangles, in axis units
    assert spans == pytest.approx([30.0, 60.0])
    assert [p.get_width() for p in ax.patches] == pytest.approx([5.0, 4.0])
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "not training (validation)" in labels


def test_a_long_run_is_drawn_in_minutes(tmp_path: Path) -> None:
    ax = power_figure(read_run_dir(_run(tmp_path / "run", 7200.0, [(600.0, 120.0)]))).axes[0]
    assert ax.get_xlabel() == "time since start (min)"
    assert max(max(line.get_xdata()) for line in ax.get_lines()) == pytest.approx(120.0)
    assert [(p.get_x(), p.get_width()) for p in ax.patches] == [pytest.approx((10.0, 2.0))]
