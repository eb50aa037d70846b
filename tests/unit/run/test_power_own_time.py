"""A profile window times training, not wattwise: the hooks' own counter reads are left out of its time.

On a coarse energy counter the tuner reads the counter at each step near a window's ends (2.8 ms a read on
an H100, as the realistic simulated GPU's reads take), a varying number of them per window; counted in the
window's time, they made each limit look slower by however many fell into its window, and repeats of one
workload chose different limits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.support.tuning_runs import tuning_run
from wattwise.devices import Physics
from wattwise.power_limit import PowerLimitTuner
from wattwise.run import Run

TUNE = ["monitor.sample_power=false", "monitor.sync_cuda=false", "power_limit.mode=tune", "power_limit.reuse=false"]
STEP_S = 0.02


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def tuned_run(tmp_path: Path, physics: Physics) -> Run:
    """A run of 20 ms steps on one simulated GPU of `physics`, once tuning ended."""
    done = tuning_run(
        tmp_path,
        3000,
        overrides=TUNE,
        physics=physics,
        base_step_time_s=STEP_S,
        stop=lambda run: run.power.tuner is not None and run.power.tuner.done,
    )
    return done.run


def tuned(tmp_path: Path, physics: Physics) -> PowerLimitTuner | None:
    """The tuner of `tuned_run`."""
    return tuned_run(tmp_path, physics).power.tuner


def test_a_profiled_limits_time_per_step_is_the_training_steps_without_the_counter_reads(tmp_path: Path) -> None:
    # The realistic physics' coarse counter and its costly reads, without the step-to-step noise and settling,
    # so that the step's own time at the highest limit is exactly 20 ms.
    physics = dataclasses.replace(Physics.realistic(seed=1), step_time_noise=0.0, power_noise=0.0, settle_s=0.0)
    assert physics.energy_read_median_s > 0.002
    tuner = tuned(tmp_path, physics)
    assert tuner is not None and tuner.done and tuner.align_to_counter
    top = next(e for e in tuner.profile if e.power_limit_w == 300.0)
    # Reads fell into every window (at least one at each of its ends: 4% of its time, counted in, before), and
    # its first reading's, which the window's timestamp precedes (0.6% of a limit's time, varying by 0.3%
    # with the read's own time, counted in, before): its time per step is the step's own.
    assert top.time_s == pytest.approx(STEP_S, rel=1e-9)
    assert all(e.time_s >= STEP_S * (1 - 1e-9) for e in tuner.profile)  # never faster than the step itself


@pytest.mark.parametrize("noise", [0.0, 0.02])
def test_the_steps_spread_that_ranks_the_limits_is_the_training_steps_not_the_reads(tmp_path: Path, noise) -> None:
    # Steps whose time varies by `noise` from one to the next, with the counter's costly reads among them.
    physics = dataclasses.replace(Physics.realistic(seed=2), step_time_noise=noise, power_noise=0.0, settle_s=0.0)
    tuner = tuned(tmp_path, physics)
    assert tuner is not None and tuner.done
    total, steps = tuner.step_spread.get(300.0, (0.0, 0))
    measured = (total / steps) ** 0.5 if steps else 0.0
    # What the steps' own times vary by: a read of 2.8 ms in a 20 ms step, counted in, would be 14% of it.
    assert measured == pytest.approx(noise, abs=0.004)


def test_tunings_cost_counts_the_time_wattwises_own_hooks_took_while_tuning(tmp_path: Path) -> None:
    # The windows leave the counter reads out of each limit's time (above); the run still spent them because
    # it tuned, so the payback's tuning time is its steps' own plus that, and the break-even repays it too.
    physics = dataclasses.replace(Physics.realistic(seed=1), step_time_noise=0.0, power_noise=0.0, settle_s=0.0)
    run = tuned_run(tmp_path, physics)
    tuner = run.power.tuner
    assert tuner is not None and tuner.finished and tuner.chosen is not None
    reads = sum(tuner.steps_at.values()) * 0.1  # at the least one read in ten steps, 2.8 ms each
    assert tuner.own_time_s >= reads * physics.energy_read_median_s * 0.5
    pb = run.power.payback()
    assert pb is not None
    by_steps = {e.power_limit_w: e.time_s for e in tuner.profile}
    top_s = by_steps[max(by_steps)]
    steps_s = sum(n * (by_steps[w] - top_s) for w, n in tuner.steps_at.items() if w in by_steps and w != max(by_steps))
    assert pb.tuning_time_s == pytest.approx(steps_s + tuner.own_time_s)
    # A checkpoint keeps it: a resumed run's payback still counts the first segment's own time.
    resumed = PowerLimitTuner(tuner.limits_w)
    resumed.load_state_dict(tuner.state_dict())
    assert resumed.own_time_s == tuner.own_time_s
