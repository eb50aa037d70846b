"""`wattwise advise`: when to start a job so it emits least (or uses least facility energy, or costs least).

This layer reads the clock (`--now` overrides it, for reproducible answers); the advisor itself is pure.
"""

from __future__ import annotations

import argparse
import time
from typing import TypedDict

from wattwise.bounds import ENERGY_KWH
from wattwise.carbon.advisor import OBJECTIVES, Advice, StartOption, advise_start, default_objective
from wattwise.carbon.integrate import J_PER_KWH
from wattwise.carbon.series import (
    INTENSITY,
    PRICE,
    PUE,
    Constant,
    Series,
    format_utc,
    parse_duration_s,
    parse_series,
    parse_timestamp_s,
)
from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.safe_files import json_text
from wattwise.vocabulary import StartObjective


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise advise` command to the `wattwise` parser."""
    parser = add_command(subparsers, "advise")
    parser.add_argument("--duration", required=True, help="expected job duration, e.g. 6h, 90m, 1h30m")
    parser.add_argument("--energy-kwh", required=True, type=float, help="expected IT (GPU+CPU) energy in kWh")
    parser.add_argument("--window", required=True, help="latest start, from now, e.g. 48h (0 = now only)")
    parser.add_argument("--pue", help="PUE: a number (e.g. 1.1) or a CSV series; default 1.0")
    parser.add_argument("--intensity", help="grid carbon intensity in gCO2e/kWh: a number or a CSV series")
    parser.add_argument("--price", help="electricity price per kWh: a number or a CSV series")
    parser.add_argument("--currency", help="currency of --price, for display (e.g. EUR)")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        help="what to minimise (default: emissions with --intensity, else cost with --price, else facility-energy)",
    )
    parser.add_argument("--now", help="the current time, ISO 8601 with timezone (default: the clock)")
    parser.add_argument("--json", action="store_true", help="print the advice as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise advise` with its parsed arguments.

    Returns:
        The exit status.
    """
    for flag, value in (("--pue", args.pue), ("--intensity", args.intensity), ("--price", args.price)):
        if value is not None and not value.strip():
            raise UsageError(f"{flag} is empty; give a number or a CSV series, or leave {flag} out")
    now_s = parse_timestamp_s(args.now, where="--now") if args.now else time.time()
    pue = parse_series(args.pue, PUE) if args.pue else Constant(1.0, "not supplied (1.0 assumed)")
    intensity = parse_series(args.intensity, INTENSITY) if args.intensity else None
    price = parse_series(args.price, PRICE) if args.price else None
    advice = advise_start(
        duration_s=parse_duration_s(args.duration, flag="--duration"),
        energy_j=ENERGY_KWH.check(args.energy_kwh, "--energy-kwh") * J_PER_KWH,
        now_s=now_s,
        window_s=parse_duration_s(args.window, flag="--window"),
        pue=pue,
        intensity=intensity,
        price=price,
        objective=args.objective or default_objective(intensity, price),
    )
    sources = {
        "pue": pue.source,
        "intensity": intensity.source if intensity else None,
        "price": price.source if price else None,
    }
    if args.json:
        print(json_text(advice_dict(advice, sources, args.currency)))
    else:
        print(advice_text(advice, args.currency))
        for line in assumptions(intensity=intensity, price=price, pue=pue):
            print(line)
    return 0


def assumptions(*, intensity: Series | None, price: Series | None, pue: Series) -> list[str]:
    """What the advice assumed, one line each: an input given (or defaulted) as one value for every hour.

    A constant intensity or price (a number, a table code's yearly average) is the same at every start, so
    only a series can make one start better than another; the line says so.
    """
    lines = []
    for name, series in (("intensity", intensity), ("price", price)):
        if isinstance(series, Constant):
            lines.append(
                f"Assumed:       {name} {series.value:g} at every hour ({series.source}); a constant favours no "
                f"start over another: give --{name} an hourly CSV series"
            )
    if isinstance(pue, Constant):
        lines.append(f"Assumed:       PUE {pue.value:g} at every hour ({pue.source})")
    return lines


class OptionDict(TypedDict):
    """One start of the job, as `wattwise advise --json` gives it under `best` and `now`."""

    start_time: str
    start_s: float
    wait_s: float
    it_energy_j: float
    facility_energy_j: float
    facility_energy_kwh: float
    pue_effective: float
    emissions_kg_co2e: float | None
    intensity_effective_g_per_kwh: float | None
    cost: float | None


class AdviceDict(TypedDict):
    """What `wattwise advise --json` prints: the best start and starting now, and the saving between them."""

    objective: str
    best: OptionDict
    now: OptionDict
    #: In `saving_unit`: kg CO2e, kWh or the currency.
    saving: float
    saving_unit: str
    saving_percent: float
    candidates_checked: int
    currency: str | None
    sources: dict[str, str | None]


def advice_dict(advice: Advice, sources: dict[str, str | None], currency: str | None) -> AdviceDict:
    """The advice as JSON-ready data: both options, the saving in the objective's units and in %."""
    unit, scale = _saving_unit(advice.objective, currency)
    return AdviceDict(
        objective=advice.objective,
        best=_option_dict(advice.best, advice.now.start_s),
        now=_option_dict(advice.now, advice.now.start_s),
        saving=advice.saving * scale,
        saving_unit=unit,
        saving_percent=100.0 * advice.saving_fraction,
        candidates_checked=advice.candidates,
        currency=currency,
        sources=sources,
    )


def advice_text(advice: Advice, currency: str | None) -> str:
    """The advice as the lines `wattwise advise` prints: the best start, starting now, and the saving."""
    unit, scale = _saving_unit(advice.objective, currency)
    wait_s = advice.best.start_s - advice.now.start_s
    lines = [
        f"Best start:    {format_utc(advice.best.start_s)} ({_wait(wait_s)})",
        f"  {_figures(advice.best, currency)}",
        f"Starting now:  {format_utc(advice.now.start_s)}",
        f"  {_figures(advice.now, currency)}",
        f"Saving:        {advice.saving * scale:.4g} {unit} ({100.0 * advice.saving_fraction:.1f}%) "
        f"by minimising {advice.objective}; {advice.candidates} candidate starts checked",
    ]
    return "\n".join(lines)


def _option_dict(option: StartOption, now_s: float) -> OptionDict:
    t = option.totals
    return OptionDict(
        start_time=format_utc(option.start_s),
        start_s=option.start_s,
        wait_s=option.start_s - now_s,
        it_energy_j=t.it_energy_j,
        facility_energy_j=t.facility_energy_j,
        facility_energy_kwh=t.facility_energy_j / J_PER_KWH,
        pue_effective=t.pue_effective,
        emissions_kg_co2e=None if t.emissions_g is None else t.emissions_g / 1000.0,
        intensity_effective_g_per_kwh=t.intensity_effective_g_per_kwh,
        cost=t.cost,
    )


def _figures(option: StartOption, currency: str | None) -> str:
    t = option.totals
    parts = [f"facility energy {t.facility_energy_j / J_PER_KWH:.4g} kWh (PUE {t.pue_effective:.3f})"]
    if t.emissions_g is not None:
        parts.insert(0, f"emissions {t.emissions_g / 1000.0:.4g} kg CO2e")
    if t.cost is not None:
        parts.append(f"cost {t.cost:.4g} {currency or 'price units'}")
    return ", ".join(parts)


def _saving_unit(objective: str, currency: str | None) -> tuple[str, float]:
    """Display unit of the objective and the factor from the advisor's units (g, J, currency) to it."""
    if objective == StartObjective.EMISSIONS:
        return "kg CO2e", 1e-3
    if objective == StartObjective.FACILITY_ENERGY:
        return "kWh", 1.0 / J_PER_KWH
    return currency or "price units", 1.0


def _wait(wait_s: float) -> str:
    if wait_s <= 0:
        return "now"
    hours, rest_s = divmod(round(wait_s), 3600)
    return f"in {hours} h {rest_s // 60:02d} min" if hours else f"in {rest_s // 60} min {rest_s % 60:02d} s"
