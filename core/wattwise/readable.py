"""Figures as people read them: the one place wattwise's outputs turn a number and its unit into text.

Every output that a person reads (the CLI's lines and tables, the dashboard, the HTML report, a printed
`Measurement`) writes its figures through these helpers, so that a figure reads alike everywhere: an
energy with its uncertainty (`12,345.6 ± 1.2 J`, both rounded to what the uncertainty resolves), a duration
in the unit its size calls for (`45.2 s`, `1.2 min`, `3.4 h`, `2.1 days`, never `0.0199 h`), emissions in
grams or kilograms (`0.75 g CO2e`, never `0.0007473 kg CO2e`). Files (JSON, CSV) keep SI numbers: only text
for reading goes through here. A leaf module: it imports nothing of wattwise, so every layer may use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

#: How many significant digits a figure without an uncertainty keeps (`sig`).
DIGITS = 2
#: A minute, an hour and a day in seconds: a duration is written in the largest unit it holds twice.
_DURATION_UNITS = ((86_400.0, "days"), (3_600.0, "h"), (60.0, "min"))


def resolution(uncertainty: float) -> int:
    """The decimal places a figure known to within `uncertainty` is shown with (negative: tens, hundreds).

    The uncertainty keeps two significant digits when it starts with 1 or 2, else one.
    """
    exponent = math.floor(math.log10(uncertainty))
    digits = 2 if uncertainty / 10.0**exponent < 3.0 else 1
    return digits - 1 - exponent


def with_uncertainty(
    value: float, uncertainty: float | None, unit: str = "", *, places: int = 1, grouped: bool = False
) -> str:
    """`value ± uncertainty unit`, both rounded to what the uncertainty resolves.

    Without an uncertainty (None or 0: an exact counter, or a summary that does not say) the value is
    written with `places` decimals and no `±`. `grouped` writes thousands apart (`12,345.6`).
    """
    comma = "," if grouped else ""
    suffix = f" {unit}" if unit else ""
    if uncertainty is None or not math.isfinite(uncertainty) or uncertainty <= 0:
        return f"{value:{comma}.{places}f}{suffix}"
    decimals = resolution(uncertainty)
    if decimals >= 0:
        return f"{value:{comma}.{decimals}f} ± {uncertainty:.{decimals}f}{suffix}"
    step = 10.0**-decimals
    return f"{round(value / step) * step:{comma}.0f} ± {round(uncertainty / step) * step:.0f}{suffix}"


def sig(value: float, digits: int = DIGITS) -> str:
    """`value` to `digits` significant digits, whole numbers past them, never in exponent notation.

    `0.0007473` -> `0.00075`, `1.19` -> `1.2`, `71.6` -> `72`, `1234.5` -> `1,234`.
    """
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - exponent)
    return f"{round(value, decimals):,.{decimals}f}"


def duration(seconds: float, digits: int = DIGITS) -> str:
    """A duration in the unit its size calls for: `45.2 s`, `1.2 min`, `3.4 h`, `2.1 days`.

    A unit is used from twice its size (`90 min`, not `1.5 h`), minutes from one; `digits` significant digits.
    """
    if not math.isfinite(seconds):
        return "-"
    for unit_s, name in _DURATION_UNITS:
        if abs(seconds) >= 2 * unit_s:
            return f"{sig(seconds / unit_s, digits)} {name}"
    if abs(seconds) >= 60.0:
        return f"{sig(seconds / 60.0, digits)} min"
    return f"{sig(seconds, max(digits, 3))} s"


def _scaled(value: float, uncertainty: float | None, unit: str, digits: int) -> str:
    """`value unit`, with its uncertainty when there is one, else to `digits` significant digits."""
    if uncertainty is not None and math.isfinite(uncertainty) and uncertainty > 0:
        return with_uncertainty(value, uncertainty, unit, grouped=True)
    return f"{sig(value, digits)} {unit}"


def emissions(kg_co2e: float, uncertainty_kg: float | None = None, *, digits: int = DIGITS) -> str:
    """Emissions in the unit their size calls for: `0.75 g CO2e`, `12 kg CO2e`, `3.4 t CO2e`.

    With an uncertainty, both are rounded to what it resolves; without, to `digits` significant digits.
    """
    if abs(kg_co2e) >= 1000.0:
        scale, unit = 1e-3, "t CO2e"
    elif abs(kg_co2e) >= 1.0:
        scale, unit = 1.0, "kg CO2e"
    else:
        scale, unit = 1e3, "g CO2e"
    return _scaled(kg_co2e * scale, None if uncertainty_kg is None else uncertainty_kg * scale, unit, digits)


def intensity(g_per_kwh: float) -> str:
    """A grid's carbon intensity: `380 gCO2e/kWh`."""
    return f"{sig(g_per_kwh, 3)} gCO2e/kWh"


def or_dash(value: float | None, spec: str) -> str:
    """`value` formatted by `spec` (`format(value, spec)`), or "-" where it is unknown: a table's empty cell."""
    return format(value, spec) if value is not None else "-"


# -- tables ---------------------------------------------------------------------------------------------
#: A column's alignment: its cells start at its left edge, or end at its right one.
LEFT: Literal["<"] = "<"
RIGHT: Literal[">"] = ">"


@dataclass(frozen=True)
class Column:
    """One column: its title, how many characters it takes (0: as many as its cell) and its alignment."""

    title: str
    width: int = 0
    align: Literal["<", ">"] = LEFT


def columns_of(*specs: str) -> tuple[Column, ...]:
    """Columns from `title:<width` (left-aligned) or `title:>width` (right-aligned); a bare title is unpadded."""
    found = []
    for spec in specs:
        title, colon, rest = spec.rpartition(":")
        if not colon:
            found.append(Column(spec))
            continue
        align, width = rest[:1], rest[1:]
        if align not in (LEFT, RIGHT) or not width.isdigit():
            raise ValueError(f"column {spec!r}: write title:<width or title:>width")
        found.append(Column(title, int(width), LEFT if align == LEFT else RIGHT))
    return tuple(found)


def table_line(columns: Sequence[Column], cells: Sequence[object], *, sep: str = " ", indent: str = "") -> str:
    """One line of the table: each cell padded to its column's width, the columns `sep` apart."""
    padded = (
        format(str(cell), f"{column.align}{column.width}") if column.width else str(cell)
        for column, cell in zip(columns, cells, strict=True)
    )
    return indent + sep.join(padded)


def table_lines(
    columns: Sequence[Column], rows: Iterable[Sequence[object]], *, sep: str = " ", indent: str = ""
) -> list[str]:
    """The title line and a line for each row."""
    titles = [column.title for column in columns]
    return [table_line(columns, cells, sep=sep, indent=indent) for cells in (titles, *rows)]
