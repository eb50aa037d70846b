"""Physical bounds on every figure a user or a file gives wattwise: one place, reused by every reader.

A figure outside its bound is a typo or a unit mix-up (mW for W, Wh for J), never a real machine: taken
as it is, 1e300 W or a PUE of 1.7e308 overflows every figure derived from it into nulls, infinities or a
300-digit percentage. Each reader (the CLI's flags, FRONTIER.json, Zeus traces, the carbon series, the
configuration) checks its figures against the `Bound` of their unit and refuses one outside with a
`UsageError` naming the field and the range, which the CLI turns into one line and exit status 2.

The bounds are generous: far above any one job, far below where arithmetic breaks.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import cast

from wattwise.errors import UsageError


@dataclass(frozen=True)
class Bound:
    """The plausible range of one kind of figure."""

    #: What the figure is, for messages ("power", "energy").
    what: str
    unit: str
    #: Lowest value accepted (inclusive), or None: no lower bound.
    low: float | None
    #: Highest value accepted (inclusive).
    high: float
    #: True: the value must be above `low`, not equal to it (a duration, a positive energy).
    above_low: bool = False

    def check(self, value: float, field: str) -> float:
        """`value` when it is a finite number within the bound.

        Args:
            value: the figure.
            field: how the user gave it (`--pue`, `FRONTIER.json: points[3]: energy_j`), for the message.

        Returns:
            `value` as a float.

        Raises:
            UsageError: `value` is not finite or outside the bound; the message names `field` and the range.
        """
        number = float(value)
        too_low = self.low is not None and (number <= self.low if self.above_low else number < self.low)
        if not math.isfinite(number) or too_low or number > self.high:
            raise UsageError(f"{field} must be {self.describe()} (got {value!r}); check the unit")
        return number

    def check_number(self, value: object, field: str) -> float:
        """`value` when it is a number (int, float, NumPy number; not a str, bool or list) within the bound.

        `check` takes what `float()` takes ("1e3" included), which suits a command-line flag; a file wattwise
        wrote holds numbers, so anything else in it is a damaged or forged file, and a call passing anything
        else is a mistake.

        Args:
            value: the field's value as the file holds it.
            field: where it was read (`spool file x.json: energy_j`), for the message.

        Returns:
            `value` as a float.

        Raises:
            UsageError: `value` is not a number, not finite, or outside the bound.
        """
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UsageError(f"{field} must be a number, {self.describe()} (got {value!r}, a {type(value).__name__})")
        return self.check(cast(float, value), field)

    def describe(self) -> str:
        """The range in words: "between 0 and 5000 W", "above 0 and at most 1e+09 s"."""
        unit = f" {self.unit}" if self.unit else ""
        if self.low is None:
            return f"a number from {-self.high:g} to {self.high:g}{unit}"
        if self.above_low:
            return f"above {self.low:g} and at most {self.high:g}{unit}"
        return f"between {self.low:g} and {self.high:g}{unit}"


#: Power of one device, or a power limit (W): no accelerator draws more than a few kilowatts.
POWER_W = Bound("power", "W", 0.0, 5000.0)
#: Energy of one measured window, iteration, epoch or job (J): about 280 GWh, beyond any one job.
ENERGY_J = Bound("energy", "J", 0.0, 1e15, above_low=True)
#: The same energy in kWh, as `wattwise advise --energy-kwh` takes it (1 kWh = 3.6e6 J).
ENERGY_KWH = Bound("energy", "kWh", 0.0, ENERGY_J.high / 3.6e6, above_low=True)
#: A duration (s): an iteration, an epoch, a straggler's time; about 31 years.
TIME_S = Bound("time", "s", 0.0, 1e9, above_low=True)
#: A GPU clock frequency (MHz).
FREQUENCY_MHZ = Bound("frequency", "MHz", 0.0, 100_000.0, above_low=True)
#: A power limit (W): a limit of 0 W or less is no limit any GPU takes.
POWER_LIMIT_W = Bound("power limit", "W", 0.0, POWER_W.high, above_low=True)
#: A run's energy so far (J): zero at its start, else within the bound of any energy.
RUN_ENERGY_J = Bound("energy", "J", 0.0, ENERGY_J.high)
#: A run's time so far (s): zero at its start, else within the bound of any duration.
RUN_TIME_S = Bound("time", "s", 0.0, TIME_S.high)
#: A recurring job's cost, `eta * E + (1 - eta) * max_power_w * T` in joules: at most a run's energy plus
#: 100,000 GPUs at the highest power for the longest time.
COST_J = Bound("cost", "J", 0.0, ENERGY_J.high + 100_000 * POWER_W.high * TIME_S.high)
#: A point in time, in seconds since the epoch (or on a caller's own clock, which starts at 0): up to the
#: year 5138.
TIMESTAMP_S = Bound("time since the epoch", "s", 0.0, 1e11)
#: Power usage effectiveness: facility energy over IT energy, 1 at best; the worst data centres reach about 3.
PUE = Bound("PUE", "", 1.0, 10.0)
#: Grid carbon intensity (gCO2e/kWh): about 1100 for coal, so 5000 is never a real grid.
INTENSITY_G_PER_KWH = Bound("carbon intensity", "gCO2e/kWh", 0.0, 5000.0)
#: Electricity price per kWh, in any currency: may be negative (surplus renewables).
PRICE_PER_KWH = Bound("electricity price", "per kWh", None, 1e6)

#: The bound of a figure by the SI unit its name ends with (`energy_j`, `time_s`, `average_power_w`).
BY_SUFFIX: dict[str, Bound] = {"_j": ENERGY_J, "_s": TIME_S, "_w": POWER_W, "_mhz": FREQUENCY_MHZ}


def for_field(name: str) -> Bound:
    """The bound of a figure named with its unit (`energy_j`, `time_s`, `power_w`, `frequency_mhz`).

    Raises:
        KeyError: the name ends with no unit this module bounds.
    """
    for suffix, bound in BY_SUFFIX.items():
        if name.endswith(suffix):
            return bound
    raise KeyError(f"no bound for {name!r}: name a figure with its unit (_j, _s, _w, _mhz)")


def check_field(name: str, value: float, where: str) -> float:
    """`value` of the figure `name`, checked against the bound of its unit; `where` says where it was read.

    Raises:
        UsageError: the value is not finite or outside the bound.
    """
    return for_field(name).check(value, f"{where}: {name}" if where else name)


def check_integer(value: object, field: str, *, low: int, high: int) -> int:
    """`value` when it is an integer (not a bool, a float or a string) from `low` to `high`.

    Raises:
        UsageError: naming `field`, the range and the value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= int(value) <= high:
        raise UsageError(f"{field} must be an integer from {low} to {high} (got {value!r})")
    return int(value)


__all__ = [
    "BY_SUFFIX",
    "COST_J",
    "ENERGY_J",
    "ENERGY_KWH",
    "FREQUENCY_MHZ",
    "INTENSITY_G_PER_KWH",
    "POWER_LIMIT_W",
    "POWER_W",
    "PRICE_PER_KWH",
    "PUE",
    "RUN_ENERGY_J",
    "RUN_TIME_S",
    "TIMESTAMP_S",
    "TIME_S",
    "Bound",
    "check_field",
    "check_integer",
    "for_field",
]
