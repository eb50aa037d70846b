"""Power-limit selectors and the tuning state machine (pure logic)."""

from __future__ import annotations

import pytest

from wattwise.errors import UsageError
from wattwise.power_limit import PowerLimitTuner, cap_limit_w, profile_limits_w, select_power_limit, zeus_cost
from wattwise.profile import ProfileEntry

# time_s and energy_j per step at each limit, chosen so every selector has a different answer.
PROFILE = [
    ProfileEntry(300.0, 1.00, 250.0),
    ProfileEntry(250.0, 1.02, 225.0),
    ProfileEntry(200.0, 1.08, 200.0),
    ProfileEntry(150.0, 1.40, 196.0),
]


def test_zeus_cost_weights_energy_and_max_power_time():
    assert zeus_cost(200.0, 2.0, eta=0.25, max_power_w=300.0) == pytest.approx(0.25 * 200 + 0.75 * 300 * 2)


def test_energy_selector_picks_least_energy():
    assert select_power_limit(PROFILE, "energy").power_limit_w == 150.0


def test_time_selector_picks_fastest():
    assert select_power_limit(PROFILE, "time").power_limit_w == 300.0


def test_cost_selector_follows_eta():
    # eta=0.5, MaxPower=300: costs 275, 265.5, 262, 308 -> 200 W.
    assert select_power_limit(PROFILE, "cost", eta=0.5).power_limit_w == 200.0
    assert select_power_limit(PROFILE, "cost", eta=1.0).power_limit_w == 150.0
    assert select_power_limit(PROFILE, "cost", eta=0.0).power_limit_w == 300.0


def test_cost_selector_uses_max_power_of_all_gpus():
    # One GPU (MaxPower 300 W): 200 W wins. Ten GPUs (MaxPower 3000 W): time dominates, costs
    # 1625 (300 W) < 1642.5 (250 W) < 1720 (200 W), so the fastest limit wins at the same eta.
    assert select_power_limit(PROFILE, "cost", eta=0.5, max_power_w=300.0).power_limit_w == 200.0
    assert select_power_limit(PROFILE, "cost", eta=0.5, max_power_w=3000.0).power_limit_w == 300.0


def test_slowdown_selector_bounds_time_against_the_maximum_limit():
    assert select_power_limit(PROFILE, "slowdown", max_slowdown=0.05).power_limit_w == 250.0
    assert select_power_limit(PROFILE, "slowdown", max_slowdown=0.10).power_limit_w == 200.0
    assert select_power_limit(PROFILE, "slowdown", max_slowdown=0.5).power_limit_w == 150.0


def test_ties_go_to_the_higher_limit():
    tied = [ProfileEntry(200.0, 1.0, 100.0), ProfileEntry(250.0, 1.0, 100.0)]
    assert select_power_limit(tied, "energy").power_limit_w == 250.0


@pytest.mark.parametrize("kwargs", [{"selector": "fastest"}, {"selector": "cost", "eta": 1.5}])
def test_bad_selector_arguments_are_usage_errors(kwargs):
    with pytest.raises(UsageError):
        select_power_limit(PROFILE, **kwargs)


def test_profile_limits_go_down_from_the_maximum_and_include_the_minimum():
    assert profile_limits_w(100.0, 300.0, 75.0) == [300.0, 225.0, 150.0, 100.0]
    assert profile_limits_w(100.0, 300.0, 100.0) == [300.0, 200.0, 100.0]


def test_cap_from_watts_or_fraction_and_range_checked():
    assert cap_limit_w(300.0, 100.0, cap_w=200.0, cap_fraction=None) == 200.0
    assert cap_limit_w(300.0, 100.0, cap_w=None, cap_fraction=0.7) == pytest.approx(210.0)
    with pytest.raises(UsageError, match="outside"):
        cap_limit_w(300.0, 100.0, cap_w=50.0, cap_fraction=None)


def drive(tuner: PowerLimitTuner, costs: dict[float, tuple[float, float]], steps: int) -> list[float | None]:
    """Run `steps` steps; at each profile window end feed (time, energy) for the current limit."""
    applied: list[float | None] = []
    for _ in range(steps):
        tuner.on_step_begin()
        current = tuner.current_limit_w
        applied.append(current)
        if tuner.on_step_end():
            assert current is not None
            t, e = costs[current]
            tuner.end_window(t * tuner.profile_steps, e * tuner.profile_steps)
    return applied


COSTS = {e.power_limit_w: (e.time_s, e.energy_j) for e in PROFILE}


def make_tuner(**kw) -> PowerLimitTuner:
    args = {"selector": "cost", "eta": 0.5, "wait_steps": 2, "warmup_steps": 1, "profile_steps": 3}
    args.update(kw)
    return PowerLimitTuner([300.0, 250.0, 200.0, 150.0], **args)


def test_tuner_waits_warms_up_profiles_each_limit_then_applies_the_choice():
    tuner = make_tuner()
    applied = drive(tuner, COSTS, 2 + 4 * 4 + 3)
    assert applied[:2] == [None, None]  # wait steps: untouched
    assert applied[2:18] == [300.0] * 4 + [250.0] * 4 + [200.0] * 4 + [150.0] * 4
    assert tuner.done and tuner.chosen is not None and tuner.chosen.power_limit_w == 200.0
    assert applied[18:] == [200.0] * 3
    assert [e.power_limit_w for e in tuner.profile] == [300.0, 250.0, 200.0, 150.0]
    assert tuner.profile[1].energy_j == pytest.approx(225.0)  # per step, window divided by its steps


def test_steps_counted_n_at_a_time_end_the_window_and_divide_by_the_steps_it_held():
    # Two optimizers step per batch: the driver counts 2 steps at a time; a 3-step window ends after 4.
    tuner = make_tuner(wait_steps=0, warmup_steps=0)
    assert tuner.on_step_begin().begin_window
    assert not tuner.on_step_end(2)
    assert tuner.on_step_end(2)
    tuner.end_window(4 * 0.1, 4 * 30.0)
    assert tuner.profile[0] == ProfileEntry(300.0, pytest.approx(0.1), pytest.approx(30.0))


def test_steps_to_finish_counts_every_phase_left():
    tuner = make_tuner()  # wait 2, then 4 limits x (warmup 1 + profile 3)
    assert tuner.steps_to_finish() == 2 + 4 * 4
    drive(tuner, COSTS, 8)  # wait, 300 W (warmup + 3 profiled), 250 W warmed up and one step profiled
    assert tuner.steps_to_finish() == 2 + 2 * 4
    drive(tuner, COSTS, 20)
    assert tuner.done and tuner.finished and tuner.steps_to_finish() == 0


def test_finishing_early_keeps_the_best_limit_measured_and_says_why():
    tuner = make_tuner(wait_steps=0)
    drive(tuner, COSTS, 8)  # 300 W and 250 W profiled
    tuner.finish_early("the run ended")
    assert tuner.done and not tuner.finished and tuner.unfinished_reason == "the run ended"
    assert tuner.chosen is not None and tuner.chosen.power_limit_w in (300.0, 250.0)
    assert tuner.chosen == select_power_limit(tuner.profile, "cost", eta=0.5, max_power_w=300.0)
    assert tuner.current_limit_w == tuner.chosen.power_limit_w


def test_finishing_early_before_any_profile_keeps_the_highest_limit():
    tuner = make_tuner()
    tuner.finish_early("too short")
    assert tuner.chosen is None and tuner.current_limit_w == 300.0 and not tuner.finished


def test_a_resumed_unfinished_tuning_goes_on_where_it_stopped():
    tuner = make_tuner(wait_steps=0)
    drive(tuner, COSTS, 6)  # 300 W done, 250 W cut in its profile
    tuner.finish_early("the run ended")
    resumed = make_tuner(wait_steps=0)
    resumed.load_state_dict(tuner.state_dict())
    assert not resumed.done and resumed.unfinished_reason is None
    assert resumed.on_step_begin().set_limit_w == 250.0
    drive(resumed, COSTS, 20)
    assert resumed.finished and [e.power_limit_w for e in resumed.profile] == [300.0, 250.0, 200.0, 150.0]


def test_state_dict_resume_keeps_choice_and_never_profiles_again():
    tuner = make_tuner()
    drive(tuner, COSTS, 30)
    resumed = make_tuner()
    resumed.load_state_dict(tuner.state_dict())
    assert resumed.done and resumed.chosen == tuner.chosen
    first = resumed.on_step_begin()
    assert first.set_limit_w == 200.0 and not first.begin_window
    assert not resumed.on_step_end()


def test_state_dict_resume_mid_profile_redoes_the_interrupted_limit():
    tuner = make_tuner(wait_steps=0)
    drive(tuner, COSTS, 6)  # 300 done, 250 half profiled
    resumed = make_tuner(wait_steps=0)
    resumed.load_state_dict(tuner.state_dict())
    assert [e.power_limit_w for e in resumed.profile] == [300.0]
    assert resumed.on_step_begin().set_limit_w == 250.0
    drive(resumed, COSTS, 20)
    assert resumed.done and [e.power_limit_w for e in resumed.profile] == [300.0, 250.0, 200.0, 150.0]


def test_ending_a_window_outside_one_is_a_programming_error():
    with pytest.raises(RuntimeError):
        make_tuner().end_window(1.0, 1.0)


def _profile_one_limit(tuner: PowerLimitTuner, step_s: float) -> int:
    """Drive one limit's warm-up and profile window with steps of `step_s`, sizing the windows as a driver
    does; the steps the window held."""
    while not tuner.on_step_begin().begin_window:
        tuner.on_step_end(1)
    steps = 0
    while True:
        steps += 1
        if tuner.on_step_end(1) and not (tuner.sizing_due and tuner.size_windows(steps * step_s)):
            tuner.end_window(steps * step_s, steps * step_s * 300.0)
            return steps
        tuner.on_step_begin()


def test_windows_are_sized_to_last_min_window_s_when_the_steps_are_short():
    """A coarse energy counter (10 updates a second on an H100) quantises a 50 ms window: with
    `min_window_s` the first window goes on past `profile_steps` until it has lasted that long, and every
    later window holds as many steps."""
    tuner = PowerLimitTuner([300.0, 200.0], wait_steps=0, warmup_steps=1, profile_steps=5, min_window_s=2.0)
    assert _profile_one_limit(tuner, step_s=0.01) == 200
    entry = tuner.profile[0]
    assert (entry.power_limit_w, entry.time_s, entry.energy_j) == (300.0, pytest.approx(0.01), pytest.approx(3.0))
    assert _profile_one_limit(tuner, step_s=0.02) == 200  # sized once: the same windows for every limit
    assert tuner.done and tuner.steps_to_finish() == 0


def test_steps_longer_than_min_window_s_keep_profile_steps():
    tuner = PowerLimitTuner([300.0, 200.0], wait_steps=0, warmup_steps=1, profile_steps=5, min_window_s=2.0)
    assert _profile_one_limit(tuner, step_s=1.0) == 5
    assert tuner.profile_steps == 5 and tuner.windows_sized


def test_without_min_window_s_there_is_nothing_to_size():
    tuner = PowerLimitTuner([300.0], wait_steps=0, warmup_steps=0, profile_steps=3)
    assert tuner.on_step_begin().begin_window
    assert [tuner.on_step_end(1) for _ in range(3)] == [False, False, True]
    assert not tuner.sizing_due


def test_a_resumed_tuner_keeps_its_sized_windows():
    tuner = PowerLimitTuner([300.0, 200.0], wait_steps=0, warmup_steps=1, profile_steps=5, min_window_s=2.0)
    _profile_one_limit(tuner, step_s=0.01)
    again = PowerLimitTuner([300.0, 200.0], wait_steps=0, warmup_steps=1, profile_steps=5, min_window_s=2.0)
    again.load_state_dict(tuner.state_dict())
    assert (again.profile_steps, again.windows_sized, again.sizing_due) == (200, True, False)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_min_window_s_must_be_finite_and_not_negative(bad: float):
    with pytest.raises(UsageError, match="min_window_s"):
        PowerLimitTuner([300.0], min_window_s=bad)
