"""Carbon-aware power limit: time-optimal on a clean grid, energy-optimal on a dirty one, from one profile."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from wattwise.carbon.policy import CarbonAwarePowerLimit, LimitChange, limit_schedule
from wattwise.carbon.series import Constant, StepSeries
from wattwise.errors import UsageError
from wattwise.profile import ProfileEntry

T0 = datetime(2026, 5, 1, tzinfo=timezone.utc).timestamp()
HOUR = 3600.0
#: 300 W is fastest; 150 W uses least energy; 200 W is neither.
PROFILE = (
    ProfileEntry(300.0, 1.0, 300.0),
    ProfileEntry(200.0, 1.2, 240.0),
    ProfileEntry(150.0, 1.5, 225.0),
)


def hourly(values: list[float]) -> StepSeries:
    return StepSeries(tuple(T0 + k * HOUR for k in range(len(values))), tuple(values), HOUR, "ci.csv")


def policy(**kwargs: float) -> CarbonAwarePowerLimit:
    args = {"threshold_g_per_kwh": 300.0, "interval_s": 900.0, **kwargs}
    return CarbonAwarePowerLimit(PROFILE, **args)


def test_limits_come_from_the_one_profile() -> None:
    p = policy()
    assert p.time_optimal.power_limit_w == 300.0
    assert p.energy_optimal.power_limit_w == 150.0


def test_schedule_switches_with_the_intensity() -> None:
    changes = limit_schedule(
        PROFILE, hourly([100, 400, 400, 100]), T0, T0 + 4 * HOUR, threshold_g_per_kwh=300.0, interval_s=900.0
    )
    assert changes == [
        LimitChange(T0, 300.0, "time", 100.0),
        LimitChange(T0 + HOUR, 150.0, "energy", 400.0),
        LimitChange(T0 + 3 * HOUR, 300.0, "time", 100.0),
    ]


def test_at_the_threshold_saves_energy() -> None:
    assert policy().mode_for(300.0) == "energy"
    assert policy().mode_for(299.9) == "time"


def test_change_waits_for_the_interval() -> None:
    p = policy(interval_s=1800.0)
    intensity = hourly([100, 400])
    assert p.check(T0 + 0.9 * HOUR, intensity) == LimitChange(T0 + 0.9 * HOUR, 300.0, "time", 100.0)
    # The grid turns dirty at T0 + 1 h, but the next check is due only at T0 + 1.4 h.
    assert p.check(T0 + 1.1 * HOUR, intensity) is None
    assert p.check(T0 + 1.39 * HOUR, intensity) is None
    assert p.check(T0 + 1.4 * HOUR, intensity) == LimitChange(T0 + 1.4 * HOUR, 150.0, "energy", 400.0)


def test_no_change_returns_none_when_due() -> None:
    p = policy()
    intensity = Constant(500.0, "grid")
    assert p.check(T0, intensity) is not None
    assert p.check(T0 + HOUR, intensity) is None
    assert p.mode == "energy"


def test_hysteresis_keeps_energy_mode_until_clearly_clean() -> None:
    changes = limit_schedule(
        PROFILE,
        hourly([400, 280, 250, 280]),
        T0,
        T0 + 4 * HOUR,
        threshold_g_per_kwh=300.0,
        interval_s=HOUR,
        hysteresis_g_per_kwh=40.0,
    )
    assert [(c.at_s - T0, c.power_limit_w) for c in changes] == [(0.0, 150.0), (2 * HOUR, 300.0)]


def test_outside_the_series_the_current_limit_stays() -> None:
    p = policy()
    intensity = hourly([100])
    assert p.check(T0 - HOUR, intensity) == LimitChange(T0 - HOUR, 150.0, "energy", None)
    assert p.check(T0, intensity) == LimitChange(T0, 300.0, "time", 100.0)
    assert p.check(T0 + 2 * HOUR, intensity) is None
    assert p.mode == "time"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold_g_per_kwh": -1.0}, "threshold must be"),
        ({"interval_s": 0.0}, "interval must be > 0"),
        ({"hysteresis_g_per_kwh": 400.0}, "hysteresis must be between 0 and the threshold"),
    ],
)
def test_bad_settings_are_usage_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        policy(**kwargs)
