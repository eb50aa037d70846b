"""`wattwise acceptance --levers`: the tables beside the papers' figures, the options, resuming and the budget."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from tests.support.fake_pynvml import FakeClock, FakeGpu, FakeNvml
from wattwise.cli.main import main
from wattwise.devices.base import Device
from wattwise.tools import acceptance, levers
from wattwise.tools.acceptance import run_checks
from wattwise.tools.checks import FAILED, PASSED, SKIPPED, Failure
from wattwise.tools.levers import (
    MCDONALD_V100,
    CapWindow,
    Sizes,
    best_cap_w,
    cap_caps_w,
    cap_rows,
    cap_table,
    choice_holds,
    compose_iteration,
    pipeline_clocks_mhz,
    pipeline_table,
    tuning_row,
    tuning_table,
)

#: A sweep, per step: slower and cheaper down to 200 W, then dearer again.
SWEEP = [
    CapWindow(300.0, 0.100, 20.0, 30, 0.2),
    CapWindow(250.0, 0.105, 18.0, 28),
    CapWindow(200.0, 0.120, 16.0, 25, 0.16),
    CapWindow(150.0, 0.200, 19.0, 15),
]


def rows() -> list[dict[str, float]]:
    return cap_rows(SWEEP, 300.0)


def test_caps_run_from_the_default_limit_down_to_the_minimum_in_whole_watts():
    assert cap_caps_w(100.0, 300.0, 5) == [300.0, 250.0, 200.0, 150.0, 100.0]
    assert cap_caps_w(100.0, 300.0, 4) == [300.0, 233.0, 167.0, 100.0]


def test_the_sweep_is_relative_to_the_default_limit_and_sits_beside_the_papers_v100_row():
    table = rows()
    assert [r["cap_w"] for r in table] == [300.0, 250.0, 200.0, 150.0]
    assert table[0]["time_ratio"] == 1.0 and table[0]["energy_ratio"] == 1.0
    assert table[2]["time_ratio"] == pytest.approx(1.2) and table[2]["energy_ratio"] == pytest.approx(0.8)
    assert table[2]["avg_power_w"] == pytest.approx(16.0 / 0.12)
    # 1% of each window's energy: the ratio is known to within sqrt(2) % of itself.
    assert table[2]["energy_ratio_uncertainty"] == pytest.approx(0.8 * math.sqrt(2) * 0.01)
    figures = {
        "gpu": "NVIDIA H200",
        "simulated": False,
        "default_w": 300.0,
        "rows": table,
        "paper": MCDONALD_V100.__dict__,
        "workload_power_profiles": "not measured: no such thing here",
    }
    md = "\n".join(cap_table(figures))
    assert "| measured | 200 | 67% | 120.0% | 80.0% ± 1.1 | 133 |" in md
    assert "| paper, V100 | 150 | 60% | 108.5% | 87.7% | |" in md
    assert "Workload power profiles: not measured: no such thing here" in md
    assert "simulated" not in md
    assert "| simulated | 200 |" in "\n".join(cap_table({**figures, "simulated": True}))


def test_a_workload_power_profile_the_gpu_offers_is_one_more_row_beside_the_default_limit(monkeypatch):
    from wattwise.devices.nvml import nvml_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeNvml([FakeGpu(workload_profiles=(0, 1, 20))]).install(monkeypatch)
    (gpu,) = nvml_gpus()
    name, note = levers.sweep_profile(gpu)
    assert name == "training" and "max_p, max_q, training" in note  # training first, where offered
    FakeNvml([FakeGpu(workload_profiles=(0, 1))]).install(monkeypatch)
    assert levers.sweep_profile(nvml_gpus()[0])[0] == "max_q"
    FakeNvml([FakeGpu()]).install(monkeypatch)  # a driver that has none
    name, note = levers.sweep_profile(nvml_gpus()[0])
    assert name is None and note.startswith("not offered here:")
    # The profile's window is set against the sweep's window at the default limit.
    profiled = cap_rows([CapWindow(300.0, 0.101, 18.5, 30, 0.0, "training")], 300.0, base=SWEEP[0])
    assert profiled[0]["profile"] == "training" and profiled[0]["energy_ratio"] == pytest.approx(0.925)
    figures = {
        "gpu": "NVIDIA H200",
        "default_w": 300.0,
        "rows": rows(),
        "profile_rows": profiled,
        "paper": MCDONALD_V100.__dict__,
        "workload_power_profiles": note,
    }
    assert "| measured, profile `training` | 300 | 100% | 101.0% | 92.5% ± 0.9 | 183 |" in "\n".join(cap_table(figures))


def test_a_sweep_without_the_default_limit_is_refused():
    with pytest.raises(ValueError, match="no row at the default limit 350 W"):
        cap_rows(SWEEP, 350.0)


def test_the_sweeps_best_cap_follows_eta():
    assert best_cap_w(rows(), eta=1.0, max_power_w=300.0) == 200.0  # least energy
    assert best_cap_w(rows(), eta=0.0, max_power_w=300.0) == 300.0  # least time


def test_a_tuning_run_is_compared_with_its_own_default_and_the_sweeps_best_cap():
    profile = [
        {"power_limit_w": 300.0, "time_s": 0.1, "energy_j": 20.0},
        {"power_limit_w": 250.0, "time_s": 0.11, "energy_j": 17.0},
    ]
    at_best = tuning_row(1.0, 0, 200.0, profile, rows(), default_w=300.0, max_power_w=300.0)
    assert at_best["sweep_best_w"] == 200.0 and at_best["cost_vs_best"] == pytest.approx(1.0)
    near = tuning_row(1.0, 1, 250.0, profile, rows(), default_w=300.0, max_power_w=300.0)
    assert near["cost_vs_best"] == pytest.approx(18.0 / 16.0)
    assert near["time_ratio_vs_default"] == pytest.approx(1.1)
    assert near["energy_ratio_vs_default"] == pytest.approx(0.85)
    # A limit between two caps is read off the sweep linearly.
    between = tuning_row(1.0, 0, 225.0, [], rows(), default_w=300.0, max_power_w=300.0)
    assert between["energy_vs_best"] == pytest.approx(17.0 / 16.0)
    assert "time_ratio_vs_default" not in between
    none = tuning_row(0.5, 0, None, [], rows(), default_w=300.0, max_power_w=300.0)
    assert none["chosen_w"] is None and "cost_vs_best" not in none


def test_whether_the_choice_held_is_one_line_per_eta_and_a_limit_within_a_watt_is_the_same():
    runs = [
        tuning_row(1.0, 0, 200.4, [], rows(), default_w=300.0, max_power_w=300.0),
        tuning_row(1.0, 1, 200.0, [], rows(), default_w=300.0, max_power_w=300.0),
        tuning_row(0.5, 0, 250.0, [], rows(), default_w=300.0, max_power_w=300.0),
        tuning_row(0.5, 1, None, [], rows(), default_w=300.0, max_power_w=300.0),
    ]
    held = choice_holds(runs)
    assert held["1"] == "the choice held (200 W, 200 W); 2 of 2 at the sweep's best cap (200 W)"
    assert held["0.5"].startswith("the choice did not hold (250 W, none); ")
    md = "\n".join(tuning_table({"gpu": "g", "simulated": True, "runs": runs, "holds": held}))
    assert "| 0.5 | 2 | none |" in md and "| 1 | 2 | 200 | 200 | n/a | n/a | 100.0% |" in md
    assert "simulated on g" in md


def test_an_iteration_of_stages_run_apart_is_composed_by_the_schedule():
    # 1F1B, 2 stages, 1 microbatch: F0 -> F1 -> B1 -> B0, so the iteration is the sum; every stage waits
    # for the other's two instructions (6 s of 2 x 6 s), at 50 W.
    times = {(0, "forward", 0): 1.0, (1, "forward", 0): 1.0, (1, "backward", 0): 2.0, (0, "backward", 0): 2.0}
    time_s, energy_j = compose_iteration(
        times, [300.0, 300.0], schedule="1f1b", stages=2, microbatches=1, p_blocking_w=50.0
    )
    assert time_s == pytest.approx(6.0) and energy_j == pytest.approx(600.0 + 50.0 * 6.0)


def test_the_pipeline_is_profiled_from_the_highest_clock_down_to_about_half_of_it():
    supported = list(range(1980, 344, -15))
    assert pipeline_clocks_mhz(supported, 4) == [1980, 1650, 1320, 990]
    assert pipeline_clocks_mhz([1000, 900, 400], 4) == [1000, 900]


def test_the_pipeline_table_sets_the_measured_plan_beside_the_prediction():
    figures = {
        "gpu": "g",
        "simulated": False,
        "stages": 2,
        "microbatches": 4,
        "schedule": "1f1b",
        "composition": "Composed.",
        "predicted": {
            "plan_time_s": 1.0,
            "plan_energy_j": 90.0,
            "max_time_s": 1.0,
            "max_energy_j": 100.0,
            "saving": 0.1,
            "slowdown": 0.0,
        },
        "measured": {
            "plan_time_s": 1.02,
            "plan_energy_j": 93.0,
            "max_time_s": 1.0,
            "max_energy_j": 100.0,
            "saving": 0.07,
            "slowdown": 0.02,
        },
    }
    md = "\n".join(pipeline_table(figures))
    assert "| planned, predicted | 1 | 90 | 10.0% | 0.0% |" in md
    assert "| planned, measured | 1.02 | 93 | 7.0% | 2.0% |" in md and "Perseus (SOSP'24)" in md


def test_quick_sizes_fit_fewer_caps_and_runs_and_every_window_spans_twenty_counter_updates():
    quick, full = Sizes.of(True), Sizes.of(False)
    assert (quick.caps, full.caps) == (4, 5)
    assert quick.tuning_runs() == [(0.5, 0), (0.5, 1), (1.0, 0)]
    assert full.tuning_runs() == [(0.5, 0), (0.5, 1), (1.0, 0), (1.0, 1)]
    gpu = counter_of(0.1)
    assert quick.window_s(gpu) == pytest.approx(2.0) and full.window_s(gpu) == pytest.approx(4.0)
    assert Sizes.profile_window_s(gpu) == pytest.approx(2.0)
    assert quick.window_s(counter_of(0.0)) == levers.MIN_WINDOW_S


class FakeGpuWithCounter:
    """Only what `Sizes` asks of a device: how often its energy counter changes."""

    def __init__(self, period_s: float) -> None:
        self.energy_update_period_s = period_s


def counter_of(period_s: float) -> Device:
    return cast(Device, FakeGpuWithCounter(period_s))


def test_without_a_gpu_the_lever_checks_skip_with_their_reason_and_exit_0(tmp_path, monkeypatch, capsys):
    FakeNvml([], clock=FakeClock()).install(monkeypatch)
    assert main(["acceptance", "--levers", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "acceptance.json").read_text())
    assert [c["name"] for c in report["checks"]] == ["cap_sweep", "tuning_vs_sweep", "pipeline_measured"]
    assert all(c["status"] == SKIPPED and "no NVIDIA GPU" in c["reason"] for c in report["checks"])
    assert report["simulated"] is False


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--levers", "--only", "discovery"], "--only discovery: not a lever check"),
        (["--simulated"], "--simulated runs only the lever checks; add --levers"),
        (["--levers", "--budget-s", "0"], "--budget-s must be a positive number of seconds"),
    ],
)
def test_options_that_do_not_go_together_are_one_line_and_exit_2(tmp_path, capsys, argv, says):
    assert main(["acceptance", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_a_rerun_keeps_the_checks_that_passed_and_runs_the_others_again(tmp_path, monkeypatch):
    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    calls: list[str] = []
    outcome = {"second": "fail"}

    def first(ctx: acceptance.Context) -> dict:
        calls.append("first")
        return {"value": 1.0}

    def second(ctx: acceptance.Context) -> dict:
        calls.append("second")
        if outcome["second"] == "fail":
            raise Failure("not yet")
        return {"saw_first": ctx.shared["first"]}

    monkeypatch.setattr(acceptance, "CHECKS", [("first", first), ("second", second)])
    report = run_checks(tmp_path)
    assert [c["status"] for c in report["checks"]] == [PASSED, FAILED]
    outcome["second"] = "pass"
    again = run_checks(tmp_path)
    assert calls == ["first", "second", "second"]  # the passed check was kept, not run again
    kept, rerun = again["checks"]
    assert kept["kept_from"] == report["time"] and kept["figures"] == {"value": 1.0}
    assert rerun["status"] == PASSED and rerun["figures"] == {"saw_first": {"value": 1.0}}
    assert "| first | passed (kept from " in (tmp_path / "acceptance.md").read_text()
    run_checks(tmp_path, fresh=True)
    assert calls[-2:] == ["first", "second"]


def recorder(calls: list[str], name: str) -> Callable[[acceptance.Context], dict]:
    """A check that passes with no figures and notes each call in `calls`."""

    def check(ctx: acceptance.Context) -> dict:
        calls.append(name)
        return {}

    return check


def test_a_folder_written_for_another_length_is_not_resumed(tmp_path, monkeypatch):
    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    calls: list[str] = []
    monkeypatch.setattr(acceptance, "CHECKS", [("one", recorder(calls, "one"))])
    run_checks(tmp_path, quick=True)
    report = run_checks(tmp_path)
    assert calls == ["one", "one"] and "another GPU or at another length" in report["notes"][0]


def test_a_check_that_would_not_fit_the_budget_is_skipped_saying_so(tmp_path, monkeypatch):
    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    calls: list[str] = []
    monkeypatch.setattr(acceptance, "CHECKS", [("slow", recorder(calls, "slow"))])
    monkeypatch.setitem(acceptance.CHECK_ESTIMATE_S, "slow", (100.0, 50.0))
    (check,) = run_checks(tmp_path, budget_s=60.0)["checks"]
    assert calls == [] and check["status"] == SKIPPED
    assert "would not fit in --budget-s 60 (needs about 100 s" in check["reason"]
    (check,) = run_checks(tmp_path, budget_s=60.0, quick=True)["checks"]
    assert calls == ["slow"] and check["status"] == PASSED


def test_the_lever_checks_estimates_fit_the_device_budget_on_an_nvml_gpu(monkeypatch):
    # An NVIDIA GPU's counter changes every 0.1 s, and this one offers a workload power profile (one more
    # window of the sweep): the whole default run stays within 7 minutes, --quick within 3.
    from wattwise.devices.nvml import nvml_gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    FakeNvml([FakeGpu(workload_profiles=(1, 20))]).install(monkeypatch)
    (gpu,) = nvml_gpus()
    assert gpu.energy_update_period_s == pytest.approx(0.1, rel=0.1)
    names = [n for n, _ in levers.LEVER_CHECKS]
    assert sum(levers.estimate_s(n, gpu, False) for n in names) <= 7 * 60
    assert sum(levers.estimate_s(n, gpu, True) for n in names) <= 3 * 60


def test_a_failure_left_in_the_folder_by_another_selection_does_not_fail_this_run(tmp_path, monkeypatch):
    FakeNvml([FakeGpu(ignores_set=True)], clock=FakeClock()).install(monkeypatch)
    assert main(["acceptance", "--out", str(tmp_path), "--only", "power_limit"]) == 1
    assert main(["acceptance", "--out", str(tmp_path), "--only", "discovery"]) == 0
    report = json.loads((tmp_path / "acceptance.json").read_text())
    assert {c["name"]: c["status"] for c in report["checks"]} == {"discovery": PASSED, "power_limit": FAILED}


def test_a_table_aligns_its_figures_right_and_writes_an_empty_cell_as_one_space():
    from wattwise.tools.checks import markdown_table

    assert markdown_table(["", "cap (W)", "energy"], [["measured", "200", ""]]) == [
        "| | cap (W) | energy |",
        "|---|---:|---:|",
        "| measured | 200 | |",
    ]
    assert markdown_table(["check", "status"], [["discovery", "passed"]], left=2)[1] == "|---|---|"


def lever_modules() -> list[tuple[str, str]]:
    """(name, source) of every module of the lever checks, read as text (nothing imported)."""
    folder = Path(levers.__file__).parent
    return [(path.stem, path.read_text()) for path in sorted(folder.glob("levers*.py"))]


def test_the_lever_checks_trainer_classes_are_module_level_and_mark_every_hook_override():
    # A class made inside a function is a new class at every call, which neither a reader nor the type
    # checker sees; the Trainer's hooks are marked @override, so that a hook the Trainer renames fails mypy.
    nested = []
    for name, source in lever_modules():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                nested += [f"{name}.{node.name}.{c.name}" for c in ast.walk(node) if isinstance(c, ast.ClassDef)]
    assert nested == []
    training = ast.parse(dict(lever_modules())["levers_training"])
    classes = [c for c in training.body if isinstance(c, ast.ClassDef)]
    assert {c.name for c in classes} >= {"EmulatedTrainer", "SweepCallback", "TuneCallback"}
    hooks = [
        (c.name, f.name, [d.id for d in f.decorator_list if isinstance(d, ast.Name)])
        for c in classes
        for f in c.body
        if isinstance(f, ast.FunctionDef) and (f.name.startswith("on_") or f.name == "training_step")
    ]
    assert len(hooks) >= 7 and all("override" in marks for _, _, marks in hooks), hooks
