"""When to run: the start time within a window that minimises emissions, facility energy or cost (pure).

The job is modelled as its expected IT energy drawn at constant power for its expected duration. For
a start time s the objective is an integral of step functions (PUE, intensity, price) over
[s, s + duration], so it is piecewise linear in s, with kinks only where the job's start or its end
crosses a step of an input series. The best start is therefore exactly one of: now, the end of the
window, a series timestamp, or a series timestamp minus the duration (all within the window). The
advisor evaluates all of those, and no grid of guesses is needed. Ties go to the earliest start.

The window bounds the start, not the end: `window_s` = 2 h lets a 6 h job start any time in the next
2 h. Every input must cover [now, now + window + duration]; the error says how long a window the data
would allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from wattwise.carbon.integrate import FacilityTotals, UniformEnergy, facility_totals
from wattwise.carbon.series import (
    INTENSITY,
    PRICE,
    PUE,
    Quantity,
    Series,
    check_series_values,
    format_duration,
    format_utc,
)
from wattwise.errors import UsageError
from wattwise.vocabulary import StartObjective

#: An objective (`StartObjective`), or its string as `--objective` takes it.
Objective = StartObjective | Literal["emissions", "facility-energy", "cost"]
#: The objectives' strings, in the order `--objective` lists them.
OBJECTIVES: tuple[str, ...] = tuple(StartObjective)

#: Relative difference below which two starts count as a tie (floating-point noise, not a saving).
_TIE_RELATIVE = 1e-9


@dataclass(frozen=True)
class StartOption:
    """A candidate start time and what the job would cost starting then."""

    start_s: float
    totals: FacilityTotals


@dataclass(frozen=True)
class Advice:
    """The best start in the window against starting now, for one objective."""

    objective: Objective
    best: StartOption
    now: StartOption
    candidates: int

    @property
    def saving(self) -> float:
        """Objective units saved by the best start (g CO2e, J or currency)."""
        return objective_value(self.now.totals, self.objective) - objective_value(self.best.totals, self.objective)

    @property
    def saving_fraction(self) -> float:
        """Saving as a fraction of starting now (0 when starting now costs nothing)."""
        now_value = objective_value(self.now.totals, self.objective)
        return self.saving / now_value if now_value > 0 else 0.0


def default_objective(intensity: Series | None, price: Series | None) -> Objective:
    """Emissions when intensity is known, else cost when a price is known, else facility energy."""
    if intensity is not None:
        return StartObjective.EMISSIONS
    if price is not None:
        return StartObjective.COST
    return StartObjective.FACILITY_ENERGY


def objective_value(totals: FacilityTotals, objective: Objective) -> float:
    """The figure an objective minimises: grams CO2e, facility joules or currency units."""
    if objective == StartObjective.FACILITY_ENERGY:
        return totals.facility_energy_j
    value = totals.emissions_g if objective == StartObjective.EMISSIONS else totals.cost
    if value is None:
        raise ValueError(f"objective {objective} needs its input series")
    return value


def advise_start(
    *,
    duration_s: float,
    energy_j: float,
    now_s: float,
    window_s: float,
    pue: Series,
    intensity: Series | None = None,
    price: Series | None = None,
    objective: Objective | None = None,
) -> Advice:
    """The start in [now_s, now_s + window_s] that minimises `objective` (default: `default_objective`)."""
    if not duration_s > 0 or not math.isfinite(duration_s):
        raise UsageError(f"--duration must be a positive duration such as 6h (got {duration_s:g} s)")
    if not energy_j > 0 or not math.isfinite(energy_j):
        raise UsageError(f"--energy-kwh must be positive (got {energy_j / 3.6e6:g} kWh)")
    if window_s < 0 or not math.isfinite(window_s):
        raise UsageError(f"--window must be a duration of 0 or more, such as 48h (got {window_s:g} s)")
    chosen = objective or default_objective(intensity, price)
    if chosen not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)} (got {chosen!r})")
    if chosen == StartObjective.EMISSIONS and intensity is None:
        raise UsageError("--objective emissions needs --intensity (a gCO2e/kWh number or a CSV series)")
    if chosen == StartObjective.COST and price is None:
        raise UsageError("--objective cost needs --price (a number per kWh or a CSV series)")
    inputs: list[tuple[Quantity, Series]] = [(PUE, pue)]
    inputs += [(q, s) for q, s in ((INTENSITY, intensity), (PRICE, price)) if s is not None]
    for quantity, series in inputs:
        check_series_values(series, quantity)
        _check_window_covered(series, quantity, now_s, window_s, duration_s)

    starts = _candidate_starts([s for _, s in inputs], now_s, now_s + window_s, duration_s)
    options = [
        StartOption(
            start,
            facility_totals(
                UniformEnergy(energy_j, start, start + duration_s),
                start,
                start + duration_s,
                pue=pue,
                intensity=intensity,
                price=price,
            ),
        )
        for start in starts
    ]
    values = [objective_value(o.totals, chosen) for o in options]
    lowest = min(values)
    tolerance = _TIE_RELATIVE * max(abs(lowest), 1e-12)
    best = next(o for o, v in zip(options, values, strict=True) if v <= lowest + tolerance)
    return Advice(chosen, best, options[0], len(options))


def _check_window_covered(series: Series, quantity: Quantity, now_s: float, window_s: float, duration_s: float) -> None:
    """Every start in the window must have data for the whole job: else say what the data allows."""
    need_end_s = now_s + window_s + duration_s
    if series.start_s <= now_s and need_end_s <= series.end_s:
        return
    if series.start_s > now_s:
        raise UsageError(
            f"{quantity.flag}: {series.source} starts at {format_utc(series.start_s)}, after now "
            f"({format_utc(now_s)}); supply data from now on (or pass --now)"
        )
    room_s = series.end_s - now_s - duration_s
    fix = (
        f"use --window {format_duration(room_s)} or less, or supply a longer series"
        if room_s >= 0
        else "even a job starting now would outlast it: supply a longer series"
    )
    raise UsageError(
        f"{quantity.flag}: {series.source} ends at {format_utc(series.end_s)}, but a job starting as late "
        f"as the window allows needs data until {format_utc(need_end_s)}; {fix}"
    )


def _candidate_starts(inputs: list[Series], first_s: float, last_s: float, duration_s: float) -> list[float]:
    """Sorted starts where the objective may be least: window ends, and where start or end meets a step."""
    starts = {first_s, last_s}
    for series in inputs:
        starts.update(series.breakpoints_s(first_s, last_s))
        starts.update(t - duration_s for t in series.breakpoints_s(first_s + duration_s, last_s + duration_s))
    return sorted(starts)
