"""The run page's power chart tells pauses apart: validation and checkpoints each have their own shade and
legend entry, another kind is named as it is, and windows.csv keeps each pause's kind for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from tests.support.run_records import write_tuned_run
from wattwise.config import load_config
from wattwise.dashboard import charts
from wattwise.devices import PowerModel, SimulatedGPU
from wattwise.record.files import WindowRow, WindowsLog, read_run_dir, read_windows_csv
from wattwise.run import Run
from wattwise.tools.workload import emulate_step

T0_S = 1_767_225_600.0  # the start of `write_tuned_run`'s run


def with_pauses(folder: Path, pauses: list[tuple[float, str | None]]) -> Path:
    """A run folder whose windows.csv holds a profiling window and a 2 s pause of each kind at each start."""
    write_tuned_run(folder)
    log = WindowsLog(folder / "windows.csv", ["gpu0"])
    log.write(WindowRow(T0_S + 1.0, "power_limit_profile", 5.0, 100.0, {"gpu0": 100.0}))
    for start_s, kind in pauses:
        log.write(WindowRow(T0_S + start_s, "paused", 2.0, 50.0, {"gpu0": 50.0}, kind=kind))
    log.close()
    return folder


def spans(folder: Path) -> list[tuple[str, str, bool, float]]:
    run = read_run_dir(folder)
    fig = charts.power_figure(run, run.windows())
    return [(s.name, s.fillcolor, bool(s.showlegend), s.x0) for s in fig.layout.shapes]


def test_validation_and_checkpoint_pauses_have_their_own_shade_and_one_legend_entry_each(tmp_path: Path) -> None:
    drawn = spans(with_pauses(tmp_path / "run", [(10.0, "validation"), (20.0, "checkpoint"), (30.0, "validation")]))
    assert [(name, legend, x0) for name, _, legend, x0 in drawn] == [
        ("tuning: profiling power limits", True, 1.0),
        ("validation", True, 10.0),
        ("checkpoint", True, 20.0),
        ("validation", False, 30.0),  # one legend entry per kind
    ]
    shade = {name: colour for name, colour, _, _ in drawn}
    assert len(set(shade.values())) == 3  # validation, checkpoint and profiling each shaded apart


def test_a_pause_of_another_kind_is_named_as_it_is(tmp_path: Path) -> None:
    drawn = spans(with_pauses(tmp_path / "run", [(10.0, "test"), (20.0, "validation")]))
    assert [name for name, _, _, _ in drawn] == ["tuning: profiling power limits", "test", "validation"]
    assert drawn[1][1] != drawn[2][1]


def test_a_pause_from_a_file_that_does_not_say_its_kind_keeps_the_one_not_training_shade(tmp_path: Path) -> None:
    drawn = spans(with_pauses(tmp_path / "run", [(10.0, None)]))
    assert drawn[1][0] == "not training (validation, checkpoint)"


def test_the_chart_of_a_simulated_run_still_says_simulated(tmp_path: Path) -> None:
    run = read_run_dir(with_pauses(tmp_path / "run", [(10.0, "validation")]))
    fig = charts.power_figure(run, run.windows())
    assert "(SIMULATED)" in fig.layout.title.text
    assert [a.text for a in fig.layout.annotations] == ["SIMULATED"]


def test_a_run_logs_each_pause_with_its_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    clock = VirtualClock(T0_S)
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    cfg = load_config(overrides=["monitor.sample_power=false", "monitor.sync_cuda=false", f"output_dir={tmp_path}"])
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    for kind in ("validation", "checkpoint"):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
        run.pause(kind)
        clock.sleep(1.0)
        run.resume()
    run.finish()
    pauses = [(w.window_name, w.kind) for w in read_windows_csv(tmp_path / "windows.csv") if w.kind]
    assert pauses == [("paused", "validation"), ("paused", "checkpoint")]
    assert not [w for w in read_windows_csv(tmp_path / "windows.csv") if ":" in w.window_name]


def test_four_hundred_pauses_are_shaded_in_one_layout_not_one_relayout_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a span at a time re-validates every span before it (a cost of pauses squared: 77 s at 400)."""
    go = pytest.importorskip("plotly.graph_objects")

    def one_at_a_time(*args: object, **kwargs: object) -> None:
        raise AssertionError("a span added on its own")

    for method in ("add_vrect", "add_shape"):
        monkeypatch.setattr(go.Figure, method, one_at_a_time)
    pauses = [(10.0 + 5.0 * i, "validation" if i % 4 else "checkpoint") for i in range(400)]
    drawn = spans(with_pauses(tmp_path / "run", pauses))
    assert len(drawn) == 401 and drawn[-1][3] == pytest.approx(10.0 + 5.0 * 399)
    assert [name for name, _, legend, _ in drawn if legend] == [
        "tuning: profiling power limits",
        "checkpoint",
        "validation",
    ]
