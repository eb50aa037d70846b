"""What the real-GPU acceptance measures to settle the simulated GPU's assumptions, counted right.

The counter's update rate counts changes (21 values read in 2 s are 20 changes: 100 ms), and the report
sets the counter period, the clock-switch latency, the power limit's settling and the clock curve beside
the simulated GPU's preset for that GPU.
"""

from __future__ import annotations

import math

import pytest

from wattwise.tools import acceptance
from wattwise.tools.acceptance import counter_changes, preset_of, preset_rows


class SteppedCounter:
    """A counter that takes a new value every `period_s` of a fake clock that each read moves on."""

    def __init__(self, period_s: float) -> None:
        self.now_s = 0.0
        self.period_s = period_s

    def clock(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds

    def read(self) -> float:
        return float(math.floor(self.now_s / self.period_s + 1e-9))


def test_the_counters_rate_counts_changes_not_distinct_values() -> None:
    counter = SteppedCounter(0.1)
    seen = counter_changes(counter.read, 2.0, clock=counter.clock, sleep=counter.sleep)
    assert seen.count == 20  # 21 distinct values in 2 s are 20 changes
    assert seen.period_s == pytest.approx(0.1, rel=0.02)


def test_a_counter_that_never_changes_has_no_period() -> None:
    counter = SteppedCounter(100.0)
    seen = counter_changes(counter.read, 1.0, clock=counter.clock, sleep=counter.sleep)
    assert seen.count == 0 and math.isnan(seen.period_s)


def test_the_gpus_name_picks_its_preset() -> None:
    assert preset_of("NVIDIA H100 80GB HBM3") == "h100"
    assert preset_of("NVIDIA A100-SXM4-40GB") == "a100"
    assert preset_of("Tesla V100-SXM2-16GB") == "v100"
    assert preset_of("AMD Instinct MI300X") == "mi300x"
    assert preset_of("NVIDIA L4") == "h100"


def test_the_report_sets_each_measurement_beside_the_preset() -> None:
    report = {
        "gpu": {"name": "NVIDIA H100 80GB HBM3"},
        "simulated": False,
        "checks": [
            {"name": "energy_counter", "status": acceptance.PASSED, "figures": {"counter_period_s": 0.1}},
            {"name": "clock_switch", "status": acceptance.PASSED, "figures": {"clock_change_s": 0.04}},
            {"name": "power_limit", "status": acceptance.PASSED, "figures": {"settle": {"settle_s": 0.2}}},
            {
                "name": "clocks",
                "status": acceptance.PASSED,
                "figures": {
                    "rows": [
                        {"frequency_mhz": 1980, "time_s": 0.0127, "energy_j": 8.9},
                        {"frequency_mhz": 345, "time_s": 0.0511, "energy_j": 9.8},
                    ]
                },
            },
        ],
    }
    rows = preset_rows(report)
    assert rows[0].startswith("Preset `h100`")
    text = "\n".join(rows)
    assert "| energy counter period | 0.1 s | 0.1 s |" in text
    assert "| clock-switch latency | 0.04 s | 0.032 s |" in text
    assert "power limit holds within 5% | 0.2 s | 0.3 s" in text
    assert "energy per step at 345 MHz, against the highest clock | 1.1 x |" in text
    assert preset_rows({**report, "simulated": True}) == []
