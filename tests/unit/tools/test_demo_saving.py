"""The demo's printed saving: with its uncertainty and its time cost, or "not resolved" within the uncertainty;
and why the chosen limit is not the least cost when it ties with a lower one."""

from __future__ import annotations

from typing import Any

from wattwise.tools.demo import format_demo, saving_line


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
    assert saving_line(result(3000.0, 3500.0, 28.0)) == (
        "measured against that run: energy saved 14.3% ± 0.8% for +10.7% time (500 ± 28 J)"
    )


def test_a_saving_within_its_uncertainty_is_not_resolved() -> None:
    assert saving_line(result(3490.0, 3500.0, 28.0)) == (
        "measured against that run: energy saving not resolved: 0.3% ± 0.8% is within the measurement "
        "uncertainty (10 ± 28 J), for +10.7% time"
    )


def test_an_exact_counter_gives_the_saving_without_uncertainty() -> None:
    assert (
        saving_line(result(3000.0, 3500.0, 0.0))
        == "measured against that run: energy saved 14.3% for +10.7% time (500.0 J)"
    )


def demo_result(chosen_w: float, costs: dict[float, float], selector: str = "cost") -> dict[str, Any]:
    rows = [
        {"power_limit_w": w, "time_s": 0.05, "energy_j": c, "avg_power_w": c / 0.05, "cost": c}
        for w, c in sorted(costs.items(), reverse=True)
    ]
    return {
        **result(6979.0, 7630.0, 39.0),
        "framework": "lightning",
        "selector": selector,
        "eta": 0.5,
        "profile": rows,
        "chosen_power_limit_w": chosen_w,
        "max_power_limit_w": 300.0,
        "steps": 616,
        "run_dir": "wattwise_runs/demo",
    }


def test_a_chosen_row_that_is_not_the_least_cost_says_why() -> None:
    # 225 W tied with 200 W within what the windows resolved: the higher limit is chosen, and the table says so.
    tied = format_demo(demo_result(225.0, {300.0: 14.043, 225.0: 13.626, 200.0: 13.547, 175.0: 13.939}))
    assert "(200 W measured 0.6% less, within what the profile windows resolve; a tie goes to the higher" in tied
    least = format_demo(demo_result(200.0, {300.0: 14.043, 225.0: 13.626, 200.0: 13.547}))
    assert "less, within what" not in least
    # The slowdown selector chooses under its own bound, not the least cost: nothing to explain here.
    slowdown = format_demo(demo_result(300.0, {300.0: 14.043, 200.0: 13.547}, selector="slowdown"))
    assert "less, within what" not in slowdown
