"""Tuning output says what tuning did (issue 27, "Honest tuning output"): a simulated GPU that no emulated work
drives makes tuning choose nothing, and a choice that no step ran at is reported as never applied, in the
summary, the console lines and the energy statement alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.clock import VirtualClock
from tests.support.tuning_runs import SMALL_PROFILE, SMALL_PROFILE_STEPS, tuning_run
from wattwise.config import load_config
from wattwise.devices import Physics, PowerModel, SimulatedGPU
from wattwise.record.files import read_run_dir
from wattwise.record.report import FacilityInputs, build_report, energy_statement
from wattwise.record.summary import format_summary
from wattwise.run import Run
from wattwise.run.logged import step_metrics
from wattwise.tools.workload import emulate_step

TUNE = list(SMALL_PROFILE)
TUNING_STEPS = SMALL_PROFILE_STEPS


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def train(tmp_path: Path, steps: int, *, drive: bool) -> tuple[Run, SimulatedGPU, list[str]]:
    """A tuning run of `steps` optimizer steps on one simulated GPU, driven by emulated work or not (a user's
    own model); returns the run, its GPU and the wattwise warnings it gave."""
    done = tuning_run(tmp_path, steps, drive=drive)
    return done.run, done.gpu, done.said


def statement(tmp_path: Path) -> str:
    return energy_statement(build_report(read_run_dir(tmp_path / "run"), FacilityInputs()))


def test_an_undriven_simulated_gpu_makes_tuning_choose_nothing_and_say_why_once(tmp_path: Path) -> None:
    run, gpu, said = train(tmp_path, TUNING_STEPS + 10, drive=False)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    limit = summary["power_limit"]
    assert limit["chosen_power_limit_w"] is None
    assert limit["energy_saved_j"] is None and limit["baseline_energy_j"] is None
    assert limit["tuning"]["finished"] is False
    assert "nothing drove the simulated GPU" in limit["tuning"]["reason"]
    # It gave up at the first profile window: the rest of the run ran at the highest limit.
    assert limit["tuning"]["profiled"] == []
    assert [e["value"] for e in summary["settings_timeline"]] == [300.0]
    assert gpu.power_limit_w() == 300.0
    tuning_said = [m for m in said if "tuning" in m]
    assert len(tuning_said) == 1 and "chose no limit" in tuning_said[0] and "\n" not in tuning_said[0]
    assert run.final_summary is not None
    console = format_summary(run.final_summary)
    assert "chosen by" not in console and "saving" not in console
    assert "tuning chose no limit: nothing drove the simulated GPU" in console
    text = statement(tmp_path)
    assert "the GPU power limit was set to" not in text and "saved" not in text
    assert "power-limit tuning chose no limit (nothing drove the simulated GPU" in text


def test_three_undriven_runs_report_the_same_thing(tmp_path: Path) -> None:
    chosen = []
    for i in range(3):
        train(tmp_path / str(i), TUNING_STEPS + 3, drive=False)
        summary = json.loads((tmp_path / str(i) / "run" / "summary.json").read_text())
        chosen.append(summary["power_limit"]["chosen_power_limit_w"])
    assert chosen == [None, None, None]


def test_a_driven_simulated_gpu_still_chooses_and_reports_a_saving(tmp_path: Path) -> None:
    run, _gpu, _ = train(tmp_path, TUNING_STEPS + 10, drive=True)
    assert run.summary is not None
    limit = run.summary["power_limit"]
    assert limit["chosen_power_limit_w"] is not None and limit["tuning"]["steps_at_chosen"] == 10
    assert limit["energy_saved_j"] is not None
    assert f"the GPU power limit was set to {limit['chosen_power_limit_w']:g} W" in statement(tmp_path)
    assert "never applied" not in format_summary(run.final_summary)  # type: ignore[arg-type]


def test_a_choice_made_as_the_run_ends_is_reported_as_never_applied(tmp_path: Path) -> None:
    run, _gpu, _ = train(tmp_path, TUNING_STEPS, drive=True)  # profiling fills the run exactly
    assert run.final_summary is not None and run.summary is not None
    limit = run.summary["power_limit"]
    chosen = limit["chosen_power_limit_w"]
    assert chosen is not None and limit["tuning"]["steps_at_chosen"] == 0
    assert any(f"power limit {chosen:g} W was chosen but never applied" in n for n in run.summary["notes"])
    assert "the chosen limit was never applied" in format_summary(run.final_summary)
    assert "estimated saving" not in format_summary(run.final_summary)
    text = statement(tmp_path)
    assert f"power-limit tuning chose {chosen:g} W but never applied it" in text
    assert "the GPU power limit was set to" not in text and "this saved" not in text


def test_measure_mode_reports_the_limit_the_gpus_run_at_for_power_limit_w(tmp_path: Path) -> None:
    clock = VirtualClock()
    gpu = SimulatedGPU(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
    gpu.set_power_limit_w(250.0)  # set by the cluster's admin, not by wattwise
    cfg = load_config(
        overrides=[
            "monitor.sample_power=false",
            "monitor.sync_cuda=false",
            f"output_dir={tmp_path / 'run'}",
            "log_every_n_steps=2",
        ]
    )
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    run.start()
    logged = []
    for _ in range(4):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        rec = run.step_end()
        if rec is not None:
            logged.append(step_metrics(rec, run.power_limit_w))
    run.finish()
    assert run.applied_limit_w is None  # wattwise changed nothing
    assert [m["power/limit_w"] for m in logged] == [250.0, 250.0]


@pytest.mark.parametrize(
    ("step_w", "steps", "advice"),
    [
        # 5 limits, 1 + 5 x 2 = 11 steps of tuning; a fifth of 10 steps holds no two limits.
        (50, 10, "give it at least 55 optimizer steps"),
        # 21 limits, 1 + 21 x 2 = 43 steps; a fifth of 40 steps holds 3 limits 100 W apart.
        (
            10,
            40,
            "give it at least 215 optimizer steps, or set power_limit.step_w=100 to profile 3 limits (now 10 W apart)",
        ),
    ],
)
def test_tuning_that_cannot_finish_says_once_how_to_fit_into_a_fifth_of_the_run(
    tmp_path: Path, step_w: int, steps: int, advice: str
) -> None:
    overrides = [*TUNE, "power_limit.profile_steps=1", f"power_limit.step_w={step_w}"]
    said = tuning_run(tmp_path, steps, overrides=overrides, announce_steps=True).said
    assert len(said) == 1 and "tuning may not finish" in said[0]
    assert said[0].endswith(
        f"; to tune in at most a fifth of the run, {advice}, or name the run's job (job=NAME) so that its next "
        "run goes on from where this one stops, or lower power_limit.profile_steps / warmup_steps"
    )


def test_on_a_coarse_counter_the_forecast_speaks_of_time_and_counter_updates_and_advises_what_works(
    tmp_path: Path,
) -> None:
    # 150 steps of 20 ms on the realistic simulated GPU: a limit is measured for up to 20 updates (2 s).
    said = tuning_run(
        tmp_path,
        150,
        overrides=[*TUNE, "job=nightly"],
        physics=Physics.realistic(seed=1),
        base_step_time_s=0.02,
        announce_steps=True,
    ).said
    [forecast] = [s for s in said if "may not finish" in s]
    assert "a limit is measured for up to 20 updates of the energy counter, 2 s" in forecast
    assert "s of training at" in forecast and "ms a step" in forecast
    # Fewer profile or warm-up steps would not shorten windows that last a time: not advised.
    assert "profile_steps" not in forecast and "job=NAME" not in forecast  # the run names its job already
