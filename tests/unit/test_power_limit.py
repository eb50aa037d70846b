"""Power-limit selectors and the tuning state machine (pure logic)."""

from __future__ import annotations

import pytest

from wattwise.errors import UsageError
from wattwise.power_limit import (
    PowerLimitTuner,
    Ranking,
    cap_limit_w,
    payback,
    profile_limits_w,
    select_power_limit,
    zeus_cost,
)
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


# -- tuning as short as the measurement allows ------------------------------------------------------------
def drive_noisy(
    tuner: PowerLimitTuner, cost: dict[float, float], uncertainty_j: float, steps: int = 10_000
) -> list[tuple[float, int]]:
    """Run until tuning is done, each step 1 s and `cost[limit]` J (eta 1), every window known to +-`uncertainty_j`.

    Returns each window measured: (its limit, its steps).
    """
    windows: list[tuple[float, int]] = []
    for _ in range(steps):
        if tuner.done:
            break
        tuner.on_step_begin()
        current = tuner.current_limit_w
        if tuner.on_step_end():
            assert current is not None
            windows.append((current, tuner.window_steps))
            tuner.end_window(1.0 * tuner.window_steps, cost[current] * tuner.window_steps, uncertainty_j)
    return windows


def energy_tuner(limits: list[float], **kw) -> PowerLimitTuner:
    args = {"selector": "energy", "wait_steps": 0, "warmup_steps": 1, "profile_steps": 5, "window_parts": 4}
    args.update(kw)
    return PowerLimitTuner(limits, **args)


LIMITS = [300.0, 275.0, 250.0, 225.0, 200.0, 175.0, 150.0, 125.0, 100.0]


def test_the_sweep_stops_once_two_limits_in_a_row_cost_more_than_the_best_and_never_runs_the_lower_ones():
    cost = dict(zip(LIMITS, [10.0, 9.0, 8.0, 8.5, 9.5, 11.0, 13.0, 16.0, 20.0], strict=True))
    tuner = energy_tuner(LIMITS, window_parts=1)
    windows = drive_noisy(tuner, cost, 0.0)
    assert [w for w, _ in windows] == [300.0, 275.0, 250.0, 225.0, 200.0]  # 175 W and below never run
    assert tuner.finished and tuner.chosen is not None and tuner.chosen.power_limit_w == 250.0
    assert tuner.stopped_early is not None and "175, 150, 125, 100 W" in tuner.stopped_early


def test_a_limit_that_costs_no_more_than_the_best_starts_the_count_again():
    cost = dict(zip(LIMITS, [10.0, 10.0, 10.0, 10.0, 9.0, 9.5, 9.0, 8.0, 8.5], strict=True))
    windows = drive_noisy(energy_tuner(LIMITS, window_parts=1), cost, 0.0)
    assert [w for w, _ in windows] == LIMITS  # 175 W costs more than 200 W, 150 W as much, then 125 W less


def test_without_stopping_every_limit_is_profiled():
    cost = dict(zip(LIMITS, [10.0, 9.0, 8.0, 8.5, 9.5, 11.0, 13.0, 16.0, 20.0], strict=True))
    windows = drive_noisy(energy_tuner(LIMITS, window_parts=1, stop_after_worse=0), cost, 0.0)
    assert [w for w, _ in windows] == LIMITS


def test_the_highest_limit_is_measured_in_every_part_and_a_limit_far_from_the_best_in_one():
    # Each window of 5 steps is known to +-1 J: 0.2 J a step, against limits 1 J a step apart or more.
    cost = {300.0: 10.0, 275.0: 12.0, 250.0: 14.0, 225.0: 16.0}
    tuner = energy_tuner(list(cost), confirm_rounds=0)
    windows = drive_noisy(tuner, cost, 1.0)
    assert windows == [(300.0, 5)] * 4 + [(275.0, 5), (250.0, 5)]  # the sweep stopped after two costlier
    assert tuner.steps_measured == {300.0: 20, 275.0: 5, 250.0: 5}
    assert tuner.chosen is not None and tuner.chosen.power_limit_w == 300.0


def test_a_limit_close_to_the_best_is_measured_in_parts_until_told_from_it():
    # 275 W saves 0.5% of 300 W's energy, 0.05 J a step: every part (+-1 J over the window) is needed.
    cost = {300.0: 10.0, 275.0: 9.95}
    tuner = energy_tuner(list(cost), confirm_rounds=0)
    windows = drive_noisy(tuner, cost, 1.0)
    assert [w for w, _ in windows] == [300.0] * 4 + [275.0] * 4
    # Consecutive parts are one window: its figures are the totals over its 20 steps, known to +-1 J.
    entry = tuner.profile[1]
    assert (entry.power_limit_w, entry.energy_j, entry.time_s) == (275.0, pytest.approx(9.95), pytest.approx(1.0))
    assert tuner.uncertainty_j[1] == pytest.approx(1.0 / 20)


def test_a_close_limit_whose_windows_are_coarse_is_measured_in_more_parts_until_known_to_one_percent():
    # Each window of 5 steps known to +-3 J (long steps on a coarse counter: about a step's energy at each
    # end): after 4 parts 275 W's energy is known to 1.5%, not enough to tell it from 300 W 0.5% away. It
    # goes on, up to twice the parts, until its window knows it to 1% (7 parts: 0.86%); the highest limit,
    # which every saving is measured against, keeps its 4.
    cost = {300.0: 10.0, 275.0: 9.95}
    tuner = energy_tuner(list(cost), confirm_rounds=0)
    windows = drive_noisy(tuner, cost, 3.0)
    assert [w for w, _ in windows] == [300.0] * 4 + [275.0] * 7
    assert tuner.uncertainty_j[1] == pytest.approx(3.0 / 35) and tuner.uncertainty_j[1] <= 0.01 * 9.95


def test_a_new_best_is_measured_until_it_is_told_from_the_one_it_replaces():
    # 275 W is 1% cheaper, 0.1 J a step: after 2 parts (+-0.1 J a step) not yet told, after 3 it is.
    cost = {300.0: 10.0, 275.0: 9.9}
    tuner = energy_tuner(list(cost), confirm_rounds=0)
    windows = drive_noisy(tuner, cost, 1.0)
    assert [w for w, _ in windows] == [300.0] * 4 + [275.0] * 3


def test_a_limit_told_from_the_best_in_fewer_parts_is_not_measured_again():
    cost = {300.0: 10.0, 275.0: 9.0, 250.0: 9.02, 225.0: 12.0, 200.0: 13.0}
    tuner = energy_tuner(list(cost), run_to_run=0.002, min_saving=0.005)
    drive_noisy(tuner, cost, 1.0)
    assert 225.0 in tuner.told_early and 200.0 in tuner.told_early
    assert 225.0 not in tuner.queue[tuner.sweep_size :] and 200.0 not in tuner.queue[tuner.sweep_size :]


def test_a_tuning_resumed_from_its_state_keeps_what_it_measured_and_skips_the_limits_told_early():
    # A run that stops mid-sweep keeps its state (a checkpoint, or the job's next run going on from it): the
    # resumed tuner counts the steps already measured at each limit and, like the one that never stopped,
    # does not measure again in a confirm round the limits it told from the best in fewer parts.
    cost = {300.0: 10.0, 275.0: 9.0, 250.0: 9.02, 225.0: 12.0, 200.0: 13.0}
    whole = energy_tuner(list(cost), run_to_run=0.002, min_saving=0.005)
    drive_noisy(whole, cost, 1.0)
    assert whole.rounds >= 1  # it measured limits again
    cut = energy_tuner(list(cost), run_to_run=0.002, min_saving=0.005)
    while cut.limit_index < cut.sweep_size:  # the sweep, then the run stops as its first round begins
        drive_noisy(cut, cost, 1.0, steps=1)
    assert not cut.done and cut.told_early == {225.0, 200.0}
    cut.finish_early("the run ended")
    resumed = energy_tuner(list(cost), run_to_run=0.002, min_saving=0.005)
    resumed.load_state_dict(cut.state_dict())
    assert resumed.told_early == {225.0, 200.0} and resumed.steps_measured == cut.steps_measured
    drive_noisy(resumed, cost, 1.0)
    assert resumed.chosen == whole.chosen
    assert 225.0 not in resumed.queue[resumed.sweep_size :] and 200.0 not in resumed.queue[resumed.sweep_size :]


# -- one saving, with what it cost and when it pays back ---------------------------------------------------
def test_payback_gives_the_saving_per_step_tuning_s_cost_and_this_run_against_the_highest_limit():
    profile = [ProfileEntry(300.0, 1.0, 10.0), ProfileEntry(250.0, 1.1, 8.0), ProfileEntry(200.0, 1.3, 7.0)]
    pb = payback(
        profile,
        [0.1, 0.1, 0.1],
        250.0,
        {300.0: 10, 250.0: 10, 200.0: 10},
        100,
        selector="energy",
        eta=0.5,
        max_power_w=300.0,
    )
    assert pb is not None
    assert (pb.energy_per_step_saved_j, pb.time_per_step_added_s) == (pytest.approx(2.0), pytest.approx(0.1))
    assert pb.energy_per_step_saved_uncertainty_j == pytest.approx(0.1 * 2**0.5)
    assert (pb.energy_saved_fraction, pb.time_added_fraction) == (pytest.approx(0.2), pytest.approx(0.1))
    # Tuning ran 20 steps below the highest limit: 50 J less energy, 4 s more time than at 300 W.
    assert (pb.tuning_steps, pb.tuning_energy_j, pb.tuning_time_s) == (20, pytest.approx(-50.0), pytest.approx(4.0))
    assert (pb.run_energy_saved_j, pb.run_time_added_s) == (pytest.approx(250.0), pytest.approx(14.0))
    assert pb.break_even_steps == 0 and pb.paid_back  # by energy, tuning itself saved


def test_the_break_even_is_the_steps_at_the_chosen_limit_that_repay_tuning_by_the_objective():
    # Zeus cost with eta 0.5 and 300 W: 300 W costs 300 J a step, 250 W 278 J (22 less), 200 W 330 J.
    profile = [ProfileEntry(300.0, 1.0, 300.0), ProfileEntry(250.0, 1.02, 250.0), ProfileEntry(200.0, 1.5, 210.0)]
    steps_at = {300.0: 10, 250.0: 10, 200.0: 10}
    pb = payback(profile, [0.0] * 3, 250.0, steps_at, 3, selector="cost", eta=0.5, max_power_w=300.0)
    assert pb is not None
    assert pb.tuning_objective == pytest.approx(10 * -22 + 10 * 30)  # 80 J of cost
    assert pb.break_even_steps == 4 and not pb.paid_back  # 80 / 22 = 3.6: after 4 steps at 250 W
    assert pb.run_objective_saved == pytest.approx(3 * 22 - 80)
    never = payback(profile, [0.0] * 3, 300.0, steps_at, 50, selector="cost", eta=0.5, max_power_w=300.0)
    assert never is not None and never.break_even_steps is None and not never.paid_back


def test_wattwise_own_time_while_tuning_is_part_of_tunings_cost_and_its_break_even():
    # The same run, its hooks having spent 2 s of their own while tuning (counter reads): tuning took 2 s more
    # than its steps' figures say, which by the cost (eta 0.5, 300 W) is 300 J more to pay back at 22 J a step.
    profile = [ProfileEntry(300.0, 1.0, 300.0), ProfileEntry(250.0, 1.02, 250.0), ProfileEntry(200.0, 1.5, 210.0)]
    steps_at = {300.0: 10, 250.0: 10, 200.0: 10}
    plain = payback(profile, [0.0] * 3, 250.0, steps_at, 3, selector="cost", eta=0.5, max_power_w=300.0)
    pb = payback(profile, [0.0] * 3, 250.0, steps_at, 3, selector="cost", eta=0.5, max_power_w=300.0, own_time_s=2.0)
    assert plain is not None and pb is not None
    assert pb.tuning_time_s == pytest.approx(plain.tuning_time_s + 2.0)
    assert pb.run_time_added_s == pytest.approx(plain.run_time_added_s + 2.0)
    assert pb.tuning_objective == pytest.approx(80.0 + 0.5 * 300.0 * 2.0)
    assert pb.break_even_steps == 18  # 380 / 22 = 17.3
    assert pb.tuning_energy_j == plain.tuning_energy_j  # the energy meanwhile is in the counter's figures
    energy = [
        payback(profile, [0.0] * 3, 250.0, steps_at, 3, selector="energy", eta=0.5, max_power_w=300.0, own_time_s=s)
        for s in (0.0, 2.0)
    ]
    assert energy[0] is not None and energy[1] is not None
    assert energy[1].tuning_objective == energy[0].tuning_objective  # by energy, time costs nothing


def test_a_mean_over_steps_that_vary_is_known_less_well_and_a_close_limit_is_not_told_from_it() -> None:
    # Two limits 0.8% apart in cost per step, each measured over 50 steps: exact windows tell them apart, but
    # steps whose time varies by 5% from one to the next leave each mean uncertain by 0.7%: a tie.
    profile = [ProfileEntry(300.0, 0.100, 30.0), ProfileEntry(250.0, 0.100, 29.5)]
    exact = Ranking(profile, [0.0, 0.0], "cost", eta=0.5, max_power_w=300.0)
    assert exact.choice()[0] == profile[1]
    spread = [0.05 / 50**0.5] * 2
    varying = Ranking(profile, [0.0, 0.0], "cost", eta=0.5, max_power_w=300.0, spread=spread)
    assert varying.choice()[0] is None  # the highest limit ties with the best: the windows cannot tell them
    assert varying.undecided() == [300.0, 250.0]  # and a round of measuring again is asked for


def test_the_tuner_ranks_by_the_steps_spread_it_was_given_and_keeps_it_across_a_checkpoint() -> None:
    t = PowerLimitTuner([300.0, 250.0], wait_steps=0, warmup_steps=0, profile_steps=1, confirm_rounds=0)
    for limit_energy_j in (30.0, 29.4):
        t.on_step_begin()
        t.on_step_end()
        t.end_window(0.1, limit_energy_j, step_spread=0.05)
    assert t._ranking().spread == [pytest.approx(0.05), pytest.approx(0.05)]  # one step each: sd / sqrt(1)
    resumed = PowerLimitTuner([300.0, 250.0], wait_steps=0, warmup_steps=0, profile_steps=1)
    resumed.load_state_dict(t.state_dict())
    assert resumed.step_spread == t.step_spread
