"""When to run: the best start on constructed series with a known answer, ties, short windows, coverage."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from wattwise.carbon.advisor import advise_start, default_objective
from wattwise.carbon.series import Constant, StepSeries
from wattwise.errors import UsageError

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp()
HOUR = 3600.0
KWH = 3.6e6
PUE_1 = Constant(1.0, "test")


def hourly(values: list[float], source: str = "ci.csv", start_s: float = T0) -> StepSeries:
    return StepSeries(tuple(start_s + k * HOUR for k in range(len(values))), tuple(values), HOUR, source)


def test_finds_the_clean_hours() -> None:
    intensity = hourly([500, 500, 100, 100, 500, 500, 500, 500])
    advice = advise_start(
        duration_s=2 * HOUR, energy_j=10 * KWH, now_s=T0, window_s=6 * HOUR, pue=PUE_1, intensity=intensity
    )
    assert advice.objective == "emissions"
    assert advice.best.start_s == T0 + 2 * HOUR
    assert advice.best.totals.emissions_g == pytest.approx(1000.0)  # 10 kWh at 100 g/kWh
    assert advice.now.start_s == T0
    assert advice.now.totals.emissions_g == pytest.approx(5000.0)
    assert advice.saving == pytest.approx(4000.0)
    assert advice.saving_fraction == pytest.approx(0.8)


def test_best_start_may_fall_between_steps() -> None:
    # A 2.5 h job: starting at 00:30 puts its whole end in the clean hours and skips the dirty fourth hour.
    intensity = hourly([300, 100, 100, 400, 400])
    advice = advise_start(
        duration_s=2.5 * HOUR, energy_j=2.5 * KWH, now_s=T0, window_s=1.5 * HOUR, pue=PUE_1, intensity=intensity
    )
    assert advice.best.start_s == T0 + 0.5 * HOUR
    assert advice.best.totals.emissions_g == pytest.approx(0.5 * 300 + 100 + 100)


def test_ties_go_to_the_earliest_start() -> None:
    intensity = hourly([300, 200, 200, 200, 300, 300])
    advice = advise_start(duration_s=HOUR, energy_j=KWH, now_s=T0, window_s=4 * HOUR, pue=PUE_1, intensity=intensity)
    assert advice.best.start_s == T0 + HOUR


def test_constant_inputs_mean_start_now() -> None:
    advice = advise_start(
        duration_s=6 * HOUR,
        energy_j=40 * KWH,
        now_s=T0 + 123.0,
        window_s=48 * HOUR,
        pue=Constant(1.1, "x"),
        intensity=Constant(400.0, "y"),
    )
    assert advice.best.start_s == T0 + 123.0
    assert advice.saving == 0.0
    assert advice.best.totals.emissions_g == pytest.approx(40 * 1.1 * 400)


def test_now_between_steps_is_a_candidate_and_the_baseline() -> None:
    intensity = hourly([100, 500, 500, 500])
    advice = advise_start(
        duration_s=HOUR, energy_j=KWH, now_s=T0 + 0.25 * HOUR, window_s=2 * HOUR, pue=PUE_1, intensity=intensity
    )
    assert advice.best.start_s == T0 + 0.25 * HOUR
    assert advice.now.totals.emissions_g == pytest.approx(0.75 * 100 + 0.25 * 500)


def test_window_shorter_than_the_job_bounds_the_start_only() -> None:
    # The data only needs to reach now + window + duration = 7 h.
    intensity = hourly([500, 100, 100, 100, 100, 100, 100])
    advice = advise_start(
        duration_s=6 * HOUR, energy_j=6 * KWH, now_s=T0, window_s=HOUR, pue=PUE_1, intensity=intensity
    )
    assert advice.best.start_s == T0 + HOUR
    assert advice.best.totals.emissions_g == pytest.approx(600.0)
    assert advice.now.totals.emissions_g == pytest.approx(1000.0)


def test_zero_window_means_now() -> None:
    intensity = hourly([500, 100, 100])
    advice = advise_start(duration_s=HOUR, energy_j=KWH, now_s=T0, window_s=0.0, pue=PUE_1, intensity=intensity)
    assert advice.best.start_s == T0
    assert advice.candidates == 1


def test_series_that_end_inside_the_window_are_a_clear_error() -> None:
    intensity = hourly([100.0] * 10)
    with pytest.raises(UsageError, match=r"--intensity: ci.csv ends at .*10:00.* use --window 4h or less"):
        advise_start(duration_s=6 * HOUR, energy_j=KWH, now_s=T0, window_s=48 * HOUR, pue=PUE_1, intensity=intensity)


def test_series_too_short_for_the_job_itself() -> None:
    with pytest.raises(UsageError, match="even a job starting now would outlast it"):
        advise_start(duration_s=6 * HOUR, energy_j=KWH, now_s=T0, window_s=HOUR, pue=PUE_1, intensity=hourly([1.0] * 3))


def test_series_that_start_after_now_are_a_clear_error() -> None:
    pue = StepSeries((T0 + HOUR, T0 + 2 * HOUR), (1.1, 1.2), HOUR, "pue.csv")
    with pytest.raises(UsageError, match=r"--pue: pue.csv starts at .* after now"):
        advise_start(duration_s=HOUR, energy_j=KWH, now_s=T0, window_s=0.0, pue=pue)


def test_facility_energy_follows_the_pue() -> None:
    pue = StepSeries(tuple(T0 + k * HOUR for k in range(4)), (1.5, 1.4, 1.1, 1.3), HOUR, "pue.csv")
    advice = advise_start(duration_s=HOUR, energy_j=KWH, now_s=T0, window_s=3 * HOUR, pue=pue)
    assert advice.objective == "facility-energy"
    assert advice.best.start_s == T0 + 2 * HOUR
    assert advice.best.totals.facility_energy_j == pytest.approx(1.1 * KWH)
    assert advice.saving_fraction == pytest.approx(0.4 / 1.5)


def test_emissions_count_pue_and_intensity_together() -> None:
    # Hour 0 is cleaner on the grid but the facility is hot: 1.6 x 200 = 320 > 1.0 x 300 = 300.
    pue = StepSeries((T0, T0 + HOUR), (1.6, 1.0), HOUR, "pue.csv")
    advice = advise_start(duration_s=HOUR, energy_j=KWH, now_s=T0, window_s=HOUR, pue=pue, intensity=hourly([200, 300]))
    assert advice.best.start_s == T0 + HOUR
    assert advice.best.totals.emissions_g == pytest.approx(300.0)


def test_cost_objective() -> None:
    price = hourly([0.3, 0.1, 0.2], source="price.csv")
    advice = advise_start(duration_s=HOUR, energy_j=2 * KWH, now_s=T0, window_s=2 * HOUR, pue=PUE_1, price=price)
    assert advice.objective == "cost"
    assert advice.best.start_s == T0 + HOUR
    assert advice.best.totals.cost == pytest.approx(0.2)


def test_default_objective_prefers_emissions() -> None:
    assert default_objective(Constant(1, "i"), Constant(1, "p")) == "emissions"
    assert default_objective(None, Constant(1, "p")) == "cost"
    assert default_objective(None, None) == "facility-energy"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "emissions"}, "needs --intensity"),
        ({"objective": "cost"}, "needs --price"),
        ({"duration_s": 0.0}, "--duration must be a positive"),
        ({"energy_j": -1.0}, "--energy-kwh must be positive"),
        ({"window_s": -HOUR}, "--window must be"),
    ],
)
def test_bad_requests_are_usage_errors(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"duration_s": HOUR, "energy_j": KWH, "now_s": T0, "window_s": HOUR, "pue": PUE_1}
    args.update(kwargs)
    with pytest.raises(UsageError, match=message):
        advise_start(**args)  # type: ignore[arg-type]
