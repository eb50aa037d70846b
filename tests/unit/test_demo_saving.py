"""The demo's printed saving: with its uncertainty and its time cost, or "not resolved" within the uncertainty."""

from __future__ import annotations

from typing import Any

from wattwise.tools.demo import saving_line


def result(tuned_j: float, baseline_j: float, saved_u_j: float | None) -> dict[str, Any]:
    return {
        "energy_j": tuned_j,
        "time_s": 15.5,
        "baseline_energy_j": baseline_j,
        "baseline_time_s": 14.0,
        "energy_saved_uncertainty_j": saved_u_j,
    }


def test_the_saving_carries_its_uncertainty_and_its_time_cost() -> None:
    # 500 J of 3500 J saved, known to 28 J: 14.3% ± 0.8%, for 15.5 s against 14.0 s.
    assert saving_line(result(3000.0, 3500.0, 28.0)) == "energy saved 14.3% ± 0.8% for +10.7% time (500 ± 28 J)"


def test_a_saving_within_its_uncertainty_is_not_resolved() -> None:
    assert saving_line(result(3490.0, 3500.0, 28.0)) == (
        "energy saving not resolved: 0.3% ± 0.8% is within the measurement uncertainty (10 ± 28 J), for +10.7% time"
    )


def test_an_exact_counter_gives_the_saving_without_uncertainty() -> None:
    assert saving_line(result(3000.0, 3500.0, 0.0)) == "energy saved 14.3% for +10.7% time (500.0 J)"
