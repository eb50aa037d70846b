"""A simulated GPU's models: what time and power follow at each power limit and SM clock.

A **power-limit table** `power_limit,time,power` (`PowerModel`, read from a CSV file or built in): at each
power limit (W), the step time relative to the step time at the maximum limit, and the average power (W)
while busy, linear in between; an idle power; and a **clock model** (`ClockModel`): the supported SM clocks,
and time and power against SM frequency. With both a power limit and a locked clock, the slower time and
the lower power win (the hardware throttles to whichever binds first).
"""

from __future__ import annotations

import bisect
import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wattwise.errors import UsageError
from wattwise.safe_files import read_text


@dataclass(frozen=True)
class ClockModel:
    """SM clocks a simulated GPU supports, and how time and power follow them.

    With `x = f / f_max`, a step's time is `m + (1 - m) / x` of its time at the maximum clock (`m` the
    memory-bound share), and busy power above idle is `a * x + (1 - a) * ((x - x_t) / (1 - x_t)) ** k` of
    its value at the maximum clock, the second term only above the transition clock `x_t`: a linear term
    (dynamic power at the lowest voltage) plus a superlinear one where the voltage rises with the clock
    (the shape of Afzal et al., "Modeling and Chasing the Energy-Efficiency Sweet Spots in Modern GPUs").
    The defaults (`a = 0`, `x_t = 0`, `k = 2`: power as `x ** 2`) serve the ideal physics' exact tests; the
    GPU presets (`wattwise.devices.simulated.presets`) carry shapes fitted to measured profiles.
    """

    max_mhz: int = 1740
    min_mhz: int = 210
    step_mhz: int = 15
    #: Share of a step that does not speed up with the SM clock (memory-bound work).
    memory_bound_fraction: float = 0.3
    #: Exponent `k` of the superlinear term of busy power above idle.
    power_exponent: float = 2.0
    #: Share `a` of busy power above idle (at the maximum clock) that is linear in the clock.
    linear_share: float = 0.0
    #: The transition clock `x_t`, relative to the maximum, above which the superlinear term acts.
    transition: float = 0.0

    def supported_mhz(self) -> list[int]:
        """Supported clocks, highest first."""
        return list(range(self.max_mhz, self.min_mhz - 1, -self.step_mhz))

    def time_factor(self, freq_mhz: float) -> float:
        """Step time at `freq_mhz` relative to the maximum clock (>= 1)."""
        frac = self.memory_bound_fraction
        return frac + (1.0 - frac) * self.max_mhz / freq_mhz

    def power_factor(self, freq_mhz: float) -> float:
        """Busy power above idle at `freq_mhz` relative to the maximum clock (<= 1)."""
        x = freq_mhz / self.max_mhz
        rising = max(0.0, (x - self.transition) / (1.0 - self.transition))
        return float(self.linear_share * x + (1.0 - self.linear_share) * rising**self.power_exponent)


#: Plausible ranges of a GPU's power model, per column: (lowest, highest, unit). A value outside is a typo or
#: a unit mix-up (mW for W), and would make every figure derived from the model absurd.
MODEL_RANGES: dict[str, tuple[float, float, str]] = {
    "power_limit": (1.0, 5000.0, "W"),
    "time": (0.1, 100.0, "(step time relative to the maximum limit)"),
    "power": (0.0, 5000.0, "W"),
}
MAX_POWER_W = MODEL_RANGES["power"][1]


def check_model_value(column: str, value: float, where: str) -> None:
    """Raise a `UsageError` naming `where` and `column` unless `value` is in the column's plausible range."""
    low, high, unit = MODEL_RANGES[column]
    if not (math.isfinite(value) and low <= value <= high and value > 0):
        bounds = f"between {low:g} and {high:g}" if low > 0 else f"above 0 and at most {high:g}"
        raise UsageError(f"{where}: {column} must be {bounds} {unit} (got {value:g})")


@dataclass(frozen=True)
class PowerModel:
    """Power limit -> (relative step time, busy power) for a simulated GPU. Watts and seconds."""

    power_limits_w: tuple[float, ...]
    time_factors: tuple[float, ...]
    busy_power_w: tuple[float, ...]
    idle_power_w: float = 60.0
    min_limit_w: float | None = None
    max_limit_w: float | None = None
    clock: ClockModel = field(default_factory=ClockModel)
    name: str = "Simulated GPU"

    def __post_init__(self) -> None:
        n = len(self.power_limits_w)
        if n == 0 or n != len(self.time_factors) or n != len(self.busy_power_w):
            raise UsageError("power model: the power_limit, time and power columns need one value per row")
        if list(self.power_limits_w) != sorted(set(self.power_limits_w)):
            raise UsageError("power model: power_limit values must be distinct (they are sorted on load)")
        for col, values in (
            ("power_limit", self.power_limits_w),
            ("time", self.time_factors),
            ("power", self.busy_power_w),
        ):
            for row, v in enumerate(values, start=1):
                check_model_value(col, v, f"power model, row {row} (power_limit {self.power_limits_w[row - 1]:g} W)")
        if not (math.isfinite(self.idle_power_w) and 0 <= self.idle_power_w <= MAX_POWER_W):
            raise UsageError(
                f"power model: idle_power_w must be between 0 and {MAX_POWER_W:g} W (got {self.idle_power_w})"
            )
        for name, limit in (("min_limit_w", self.min_limit_w), ("max_limit_w", self.max_limit_w)):
            if limit is not None:
                check_model_value("power_limit", limit, f"power model: {name}")
        lo, hi = self.limit_range_w
        if lo >= hi:
            raise UsageError(f"power model: minimum limit {lo} W must be below the maximum {hi} W")

    @property
    def limit_range_w(self) -> tuple[float, float]:
        """The (min, max) power limits the model allows, in watts: its table's ends unless narrowed."""
        lo = self.min_limit_w if self.min_limit_w is not None else self.power_limits_w[0]
        hi = self.max_limit_w if self.max_limit_w is not None else self.power_limits_w[-1]
        return lo, hi

    def at_limit(self, limit_w: float) -> tuple[float, float]:
        """(relative step time, busy power in W) at a power limit, interpolated linearly."""
        xs = self.power_limits_w
        if limit_w <= xs[0]:
            return self.time_factors[0], self.busy_power_w[0]
        if limit_w >= xs[-1]:
            return self.time_factors[-1], self.busy_power_w[-1]
        i = bisect.bisect_right(xs, limit_w)
        w = (limit_w - xs[i - 1]) / (xs[i] - xs[i - 1])
        t = self.time_factors[i - 1] + w * (self.time_factors[i] - self.time_factors[i - 1])
        p = self.busy_power_w[i - 1] + w * (self.busy_power_w[i] - self.busy_power_w[i - 1])
        return t, p

    def operating_point(self, limit_w: float, clock_mhz: float | None) -> tuple[float, float]:
        """(relative step time, busy power W) under a power limit and an optional locked SM clock."""
        t_pl, p_pl = self.at_limit(limit_w)
        if clock_mhz is None:
            return t_pl, p_pl
        top_p = self.busy_power_w[-1]
        p_clk = self.idle_power_w + (top_p - self.idle_power_w) * self.clock.power_factor(clock_mhz)
        t_clk = self.time_factors[-1] * self.clock.time_factor(clock_mhz)
        return max(t_pl, t_clk), min(p_pl, p_clk)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], **kwargs: Any) -> PowerModel:
        """Read a `power_limit,time,power` table (watts, relative step time, average watts)."""
        p = Path(path)
        text = read_text(
            p, what=f"power model {p}", expected="a CSV power_limit,time,power table", fix="save it as a UTF-8 CSV"
        )
        try:
            return cls._from_rows(p, csv.DictReader(text.splitlines()), **kwargs)
        except csv.Error as err:
            raise UsageError(f"power model {p}: not a valid CSV file ({err})") from None

    @classmethod
    def _from_rows(cls, p: Path, reader: csv.DictReader[str], **kwargs: Any) -> PowerModel:
        if not reader.fieldnames or not {"power_limit", "time", "power"} <= set(reader.fieldnames):
            raise UsageError(f"power model {p}: needs a header with columns power_limit,time,power")
        parsed: list[tuple[float, float, float]] = []
        seen: dict[float, int] = {}
        for row in reader:
            where = f"power model {p}, line {reader.line_num}"
            try:
                values = (float(row["power_limit"]), float(row["time"]), float(row["power"]))
            except (TypeError, ValueError):
                shown = repr(row) if len(repr(row)) <= 80 else repr(row)[:77] + "..."
                raise UsageError(f"{where}: power_limit, time and power must be numbers (got {shown})") from None
            for col, v in zip(("power_limit", "time", "power"), values, strict=True):
                check_model_value(col, v, where)
            if values[0] in seen:
                raise UsageError(f"{where}: power_limit {values[0]:g} W repeats line {seen[values[0]]}")
            seen[values[0]] = reader.line_num
            parsed.append(values)
        if not parsed:
            raise UsageError(f"power model {p}: no rows after the header")
        parsed.sort()
        kwargs.setdefault("name", f"Simulated GPU ({p.name})")
        return cls(tuple(r[0] for r in parsed), tuple(r[1] for r in parsed), tuple(r[2] for r in parsed), **kwargs)

    @classmethod
    def of(cls, source: PowerModel | str | os.PathLike[str] | None) -> PowerModel:
        """`source` itself when a model, the model of that CSV file when a path, else the built-in model.

        Raises:
            UsageError: the file cannot be read or does not hold a power model (it names the file and the fix).
        """
        if isinstance(source, PowerModel):
            return source
        return cls.from_csv(source) if source is not None else cls.default()

    @classmethod
    def default(cls) -> PowerModel:
        """A made-up model shaped like a 300 W data-centre GPU training a compute-bound model.

        Not measured on any GPU. Its shape follows published power-limit profiles: little slowdown down
        to about 2/3 of the maximum limit, steep slowdown below half. At eta 0.5 the Zeus cost is lowest
        at 200 W, energy per step at 175 W, time at 275-300 W.
        """
        return cls(
            power_limits_w=(100.0, 125.0, 150.0, 175.0, 200.0, 225.0, 250.0, 275.0, 300.0),
            time_factors=(2.6, 1.75, 1.35, 1.15, 1.06, 1.03, 1.01, 1.0, 1.0),
            busy_power_w=(100.0, 124.0, 148.0, 171.0, 193.0, 212.0, 228.0, 240.0, 245.0),
            idle_power_w=60.0,
            name="Simulated GPU (built-in 300 W model)",
        )
