"""Values out of any plausible range are refused up front, naming the field: no hang, no absurd result."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from wattwise.carbon.series import INTENSITY, PUE, Constant, check_series_values
from wattwise.config import EnergyConfig, load_config, validate
from wattwise.devices.simulated import PowerModel
from wattwise.errors import ConfigError, UsageError
from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.files import check_plan_document, read_frontier_json, write_plan_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import Choice, Frontier, FrontierEntry, check_plan
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import parse_profile
from wattwise.pipeline.schedule import Step, one_f_one_b
from wattwise.power_limit import profile_limits_w, select_power_limit
from wattwise.profile import ProfileEntry
from wattwise.recurring.trace import load_trace

PROFILE = """stage,instruction,frequency,time,energy
0,forward,1410,0.01,3.0
0,forward,1000,0.012,2.5
0,backward,1410,0.02,6.0
0,backward,1000,0.024,5.0
1,forward,1410,0.01,3.0
1,forward,1000,0.012,2.5
1,backward,1410,0.02,6.0
1,backward,1000,0.024,5.0
"""


def main_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI, expect exit 2 and return its one-line error."""
    from wattwise.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def profile_csv(tmp_path: Path) -> Path:
    path = tmp_path / "profile.csv"
    path.write_text(PROFILE)
    return path


def problem() -> PlanningProblem:
    import csv

    profile = parse_profile(csv.DictReader(PROFILE.splitlines()))
    return PlanningProblem.build(profile, pipeline_dag("1f1b", 2, 4), 80.0)


# -- power model ------------------------------------------------------------------------------------------
def test_a_power_model_row_at_a_terawatt_names_the_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "model.csv"
    path.write_text("power_limit,time,power\n100,2,100\n1e12,1,200\n")
    with pytest.raises(UsageError, match=r"line 3: power_limit must be between 1 and 5000 W"):
        PowerModel.from_csv(path)


@pytest.mark.parametrize(
    ("times", "powers", "column"),
    [
        ((1.0, 1e9), (100.0, 200.0), "time"),
        ((1.0, 0.01), (100.0, 200.0), "time"),
        ((1.0, 1.0), (100.0, 1e7), "power"),
    ],
)
def test_a_power_model_out_of_range_names_the_row(
    times: tuple[float, float], powers: tuple[float, float], column: str
) -> None:
    with pytest.raises(UsageError, match=rf"row \d \(power_limit \d+ W\): {column} must be"):
        PowerModel((100.0, 200.0), times, powers)


# -- configuration ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("power_limit.profile_steps=100000000000000000000000000000", "power_limit.profile_steps"),
        ("power_limit.warmup_steps=10000000", "power_limit.warmup_steps"),
        ("power_limit.wait_steps=10000000", "power_limit.wait_steps"),
        ("log_every_n_steps=10000000", "log_every_n_steps"),
        ("power_limit.step_w=1e-9", "power_limit.step_w"),
        ("power_limit.step_w=1e9", "power_limit.step_w"),
        ("devices.simulated.num_gpus=100000", "devices.simulated.num_gpus"),
    ],
)
def test_a_setting_outside_its_range_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(overrides=[override])


def test_profile_steps_1e29_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"power_limit\.profile_steps"):
        load_config(overrides=["power_limit.profile_steps=1e29"])
    cfg = EnergyConfig()
    cfg.power_limit.profile_steps = 1e29  # type: ignore[assignment]
    with pytest.raises(ConfigError, match=r"power_limit\.profile_steps must be a whole number"):
        validate(cfg)


def test_too_many_profiled_limits_says_to_raise_step_w() -> None:
    with pytest.raises(UsageError, match=r"would profile 20001 power limits.*raise step_w to at least 1 W"):
        profile_limits_w(100.0, 300.0, 0.01)
    assert len(profile_limits_w(100.0, 300.0, 1.0)) == 201


def test_demo_with_a_tiny_step_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--step-w" in main_exit(["demo", "--step-w", "1e-9"], capsys)


# -- power-limit profiles -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad", [ProfileEntry(200.0, 1.0, 0.0), ProfileEntry(200.0, 0.0, 10.0), ProfileEntry(200.0, math.inf, 10.0)]
)
def test_a_profile_row_of_zero_time_or_energy_is_refused(bad: ProfileEntry) -> None:
    with pytest.raises(UsageError, match=r"profile row 2 \(power_limit_w 200\.0\)"):
        select_power_limit([ProfileEntry(300.0, 1.0, 250.0), bad], "energy")


# -- frontier size --------------------------------------------------------------------------------------------
def test_a_pipeline_of_ten_million_microbatches_is_refused_before_it_is_built() -> None:
    with pytest.raises(UsageError, match=r"microbatches 10000000 with 2 stages makes 40000000 instructions"):
        pipeline_dag("1f1b", 2, 10_000_000)


def test_a_picosecond_unit_time_is_refused_with_the_size() -> None:
    with pytest.raises(UsageError, match=r"unit_time_s 1e-12 s .*raise unit_time_s"):
        FrontierSolver(problem(), 1e-12)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--microbatches", "10000000", "--unit-time", "0.001"], "--microbatches"),
        (["--microbatches", "4", "--unit-time", "1e-12"], "--unit-time"),
        (["--microbatches", "4", "--unit-time", "1e-8"], "--unit-time"),
    ],
)
def test_frontier_too_large_exits_2_naming_the_option(
    tmp_path: Path, profile_csv: Path, flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = main_exit(
        ["frontier", str(profile_csv), *flags, "--p-blocking", "80", "--out", str(tmp_path / "f.json"), "--quiet"],
        capsys,
    )
    assert named in err and "at most" in err
    assert not (tmp_path / "f.json").exists()


# -- plans ----------------------------------------------------------------------------------------------------
def planned(stages: int, microbatches: int) -> tuple[tuple[Step, ...], ...]:
    return tuple(tuple(step.at(1410) for step in steps) for steps in one_f_one_b(stages, microbatches))


def frontier_with(plan: tuple[tuple[Step, ...], ...], microbatches: int = 4) -> tuple[Frontier, Choice]:
    entry = FrontierEntry(1.0, 10.0, plan)
    frontier = Frontier(
        stages=len(plan),
        microbatches=microbatches,
        schedule="1f1b",
        unit_time_s=0.001,
        p_blocking_w=80.0,
        points=(entry,),
        max_frequency_time_s=1.0,
        max_frequency_energy_j=10.0,
    )
    return frontier, Choice(entry, "intrinsic", 1.0, 10.0, 1.0, 10.0)


def test_a_plan_with_seven_instructions_for_four_microbatches_is_not_written(tmp_path: Path) -> None:
    plan = planned(2, 4)
    short = (plan[0][:7], plan[1])
    frontier, choice = frontier_with(short)
    with pytest.raises(UsageError, match=r"stage 0 has 7 instructions; the 1f1b schedule of 4 microbatches runs 8"):
        write_plan_json(frontier, choice, tmp_path / "PLAN.json")
    assert not (tmp_path / "PLAN.json").exists()


def test_a_plan_out_of_schedule_order_names_the_step() -> None:
    plan = planned(2, 4)
    swapped = (plan[0], (plan[1][1], plan[1][0], *plan[1][2:]))
    with pytest.raises(UsageError, match=r"plan\[1\]\[0\] is backward 0 where the 1f1b schedule runs forward 0"):
        check_plan(swapped, "1f1b", 4, "PLAN.json")


def test_plan_json_is_checked_before_it_is_followed() -> None:
    plan = [[[s.instruction, s.microbatch, 1410] for s in steps] for steps in one_f_one_b(2, 4)]
    good = {"stages": 2, "microbatches": 4, "schedule": "1f1b", "plan": plan}
    assert len(check_plan_document(good, "PLAN.json")[0]) == 8
    with pytest.raises(UsageError, match=r"PLAN\.json: microbatches must be a positive integer \(got 0\.7\)"):
        check_plan_document({**good, "microbatches": 0.7}, "PLAN.json")
    with pytest.raises(UsageError, match=r"plan stage 0 has 7 instructions"):
        check_plan_document({**good, "plan": [plan[0][:7], plan[1]]}, "PLAN.json")
    with pytest.raises(UsageError, match=r"plan stage 0 has 7 instructions"):
        check_plan_document({"plan": [plan[0][:7], plan[1]]}, "PLAN.json")


def test_following_a_short_plan_is_refused(tmp_path: Path) -> None:
    from wattwise.frequency.controller import load_stage_plan

    plan = [[[s.instruction, s.microbatch, 1410] for s in steps] for steps in one_f_one_b(2, 4)]
    path = tmp_path / "PLAN.json"
    path.write_text(json.dumps({"stages": 2, "microbatches": 4, "schedule": "1f1b", "plan": [plan[0][:7], plan[1]]}))
    with pytest.raises(UsageError, match=r"stage 0 has 7 instructions"):
        load_stage_plan(str(path), 1)


def test_a_frontier_whose_plan_breaks_the_schedule_is_refused(tmp_path: Path) -> None:
    plan = [[[s.instruction, s.microbatch, 1410] for s in steps] for steps in one_f_one_b(2, 4)]
    doc = {
        "stages": 2,
        "microbatches": 4,
        "schedule": "1f1b",
        "unit_time_s": 0.001,
        "p_blocking_w": 80,
        "max_frequency": {"time_s": 1, "energy_j": 10},
        "points": [{"time_s": 1, "energy_j": 10, "plan": [plan[0][:7], plan[1]]}],
    }
    path = tmp_path / "FRONTIER.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"points\[0\]: plan stage 0 has 7 instructions"):
        read_frontier_json(path)


def test_plan_json_never_holds_infinity(tmp_path: Path) -> None:
    frontier, choice = frontier_with(planned(2, 4))
    choice = Choice(choice.entry, "straggler", math.inf, math.inf, 1.0, 10.0)
    write_plan_json(frontier, choice, tmp_path / "PLAN.json")
    data = json.loads((tmp_path / "PLAN.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert data["iteration_time_s"] is None and data["plan"]


# -- traces -------------------------------------------------------------------------------------------------
TRAIN = """dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch
toy,net,8,sgd,0.1,1,0.5,3
toy,net,16,sgd,0.1,1,0.5,4
"""
POWER = """dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power
toy,net,8,sgd,100,10,80
toy,net,8,sgd,200,8,160
toy,net,16,sgd,100,5,90
toy,net,16,sgd,200,4,150
"""


def traces(tmp_path: Path, train: str, power: str) -> tuple[Path, Path]:
    (tmp_path / "train.csv").write_text(train)
    (tmp_path / "power.csv").write_text(power)
    return tmp_path / "train.csv", tmp_path / "power.csv"


def test_conflicting_duplicate_power_rows_name_both_lines(tmp_path: Path) -> None:
    paths = traces(tmp_path, TRAIN, POWER + "toy,net,8,sgd,100,12,70\n")
    with pytest.raises(UsageError, match=r"power\.csv:6: batch_size 8 at power_limit 100 W repeats line 2"):
        load_trace(*paths, "toy/net", 0.5)


def test_conflicting_duplicate_train_rows_name_both_lines(tmp_path: Path) -> None:
    paths = traces(tmp_path, TRAIN + "toy,net,8,sgd,0.1,1,0.5,7\n", POWER)
    with pytest.raises(UsageError, match=r"train\.csv:4: batch_size 8, run 1 .* repeats line 2"):
        load_trace(*paths, "toy/net", 0.5)


def test_identical_duplicate_rows_are_dropped_with_a_warning(tmp_path: Path) -> None:
    paths = traces(tmp_path, TRAIN + "toy,net,8,sgd,0.1,1,0.5,3\n", POWER + "toy,net,8,sgd,100,10,80\n")
    with pytest.warns(UserWarning, match="repeats line 2"):
        trace = load_trace(*paths, "toy/net", 0.5)
    assert trace.target_epochs[8] == (3.0,)
    assert len(trace.power[8]) == 2


def test_simulate_on_a_conflicting_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train, power = traces(tmp_path, TRAIN, POWER + "toy,net,8,sgd,100,12,70\n")
    err = main_exit(
        [
            "simulate",
            "--train",
            str(train),
            "--power",
            str(power),
            "--workload",
            "toy/net",
            "--target-metric",
            "0.5",
            "--max-epochs",
            "5",
            "--default-batch-size",
            "8",
        ],
        capsys,
    )
    assert "repeats line 2" in err


# -- reports ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("series", "quantity"),
    [(Constant(-1.0, "code"), PUE), (Constant(-5.0, "code"), INTENSITY), (Constant(math.nan, "code"), PUE)],
)
def test_a_negative_pue_or_intensity_is_refused(series: Constant, quantity: object) -> None:
    with pytest.raises(UsageError, match="must be"):
        check_series_values(series, quantity)  # type: ignore[arg-type]


def test_a_report_whose_energy_would_be_negative_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = {
        "schema": "wattwise.run/1",
        "start_time": "2026-01-01T00:00:00+00:00",
        "end_time": "2026-01-01T01:00:00+00:00",
        "energy_j": 1000.0,
        "energy_per_device_j": {"gpu0": 1000.0},
        "power_limit": {"mode": "tune", "baseline_energy_j": 500.0, "energy_saved_j": 1500.0},
    }
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    err = main_exit(["report", str(tmp_path), "--out", str(tmp_path / "out")], capsys)
    assert "energy_saved_j" in err and "negative" in err
    assert not (tmp_path / "out" / "report.json").exists()
