"""Facility and carbon awareness: PUE, grid carbon intensity and price over time (pure decisions).

- `series`: the inputs, constants or `timestamp,value` CSV step series, validated.
- `integrate`: facility energy, emissions and cost of energy spread over time.
- `advisor`: the start time within a window that minimises emissions, facility energy or cost.
- `policy`: the carbon-aware power limit (time-optimal when the grid is clean, energy-optimal when not).
- `example`: a run directory in the run record's format (`wattwise.record.summary`), for tests and the README.
"""

from wattwise.carbon.advisor import Advice, StartOption, advise_start, default_objective
from wattwise.carbon.integrate import FacilityTotals, facility_totals
from wattwise.carbon.policy import CarbonAwarePowerLimit, LimitChange, limit_schedule
from wattwise.carbon.series import INTENSITY, PRICE, PUE, Constant, Series, StepSeries, parse_series

__all__ = [
    "INTENSITY",
    "PRICE",
    "PUE",
    "Advice",
    "CarbonAwarePowerLimit",
    "Constant",
    "FacilityTotals",
    "LimitChange",
    "Series",
    "StartOption",
    "StepSeries",
    "advise_start",
    "default_objective",
    "facility_totals",
    "limit_schedule",
    "parse_series",
]
