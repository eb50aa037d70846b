"""The bundled table of yearly average grid carbon intensity, by country and by main cloud region.

`--intensity DE` (an ISO 3166-1 alpha-2 country code) or `--intensity gcp:europe-west1` (`aws:`, `azure:`
likewise) takes its figure from `wattwise/data/grid_intensity.csv`, shipped with wattwise: nothing is
fetched from the network. Each row holds the figure (gCO2e/kWh), the year it averages, its source and
licence (`SOURCES`; `wattwise/data/README.md` has the full notice):

- countries: Our World in Data's energy-data, `carbon_intensity_elec` (from Ember and the Energy Institute),
  CC BY 4.0, the latest year each country has;
- `gcp:` regions: Google Cloud's own yearly grid carbon intensity per region (region-carbon-info), 2024;
- `aws:` and `azure:` regions: neither provider publishes a figure per region, so these are the average of
  the country the region is in, and say so.

A yearly average is the coarsest honest figure: a series the user supplies (hourly, from the grid operator
or Electricity Maps) is better, and always wins when given.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources

from wattwise.errors import UsageError

#: The table, in the package's data folder.
TABLE_FILE = "grid_intensity.csv"
#: What a table code looks like: a country (`DE`) or a provider and region (`gcp:europe-west1`).
CODE = re.compile(r"[A-Za-z]{2}|(?:aws|gcp|azure):[a-z0-9-]{2,40}", re.IGNORECASE)
#: Each row's source key: the data set it comes from, for a statement.
SOURCES = {
    "owid": "Our World in Data, energy-data (carbon_intensity_elec; Ember, Energy Institute)",
    "gcp": "Google Cloud, region-carbon-info (grid carbon intensity per region)",
}


@dataclass(frozen=True)
class GridIntensity:
    """One row of the bundled table."""

    #: `DE`, `gcp:europe-west1`, `aws:eu-west-1`.
    code: str
    #: The country or the region, as a statement names it.
    name: str
    #: Yearly average, gCO2e per kWh of electricity.
    g_per_kwh: float
    #: The year the figure averages.
    year: int
    #: A key of `SOURCES`.
    source: str
    #: SPDX identifier of the figure's licence (`CC-BY-4.0`, `Apache-2.0`).
    licence: str

    def describe(self) -> str:
        """The figure's source as a statement names it: where, which year, whose data, the licence."""
        return f"{self.name} ({self.code}), {self.year} yearly average: {SOURCES[self.source]}, {self.licence}"


@functools.cache
def table() -> dict[str, GridIntensity]:
    """The bundled table by code (lower case), read once."""
    text = resources.files("wattwise").joinpath("data", TABLE_FILE).read_text(encoding="utf-8")
    rows = {}
    for row in csv.DictReader(io.StringIO(text)):
        entry = GridIntensity(
            code=row["code"],
            name=row["name"],
            g_per_kwh=float(row["g_per_kwh"]),
            year=int(row["year"]),
            source=row["source"],
            licence=row["licence"],
        )
        rows[entry.code.lower()] = entry
    return rows


def looks_like_code(text: str) -> bool:
    """Whether `text` has the form of a table code (it may still be missing from the table)."""
    return CODE.fullmatch(text.strip()) is not None


def lookup(code: str, *, flag: str = "--intensity") -> GridIntensity:
    """The table's row for `code` (case does not matter).

    Raises:
        UsageError: no such code, naming `flag`, and the codes of the same provider that come closest.
    """
    found = table().get(code.strip().lower())
    if found is not None:
        return found
    prefix = code.strip().lower().split(":")[0] + ":" if ":" in code else ""
    known = sorted(e.code for key, e in table().items() if key.startswith(prefix) and (prefix or ":" not in key))
    near = [c for c in known if c.lower().startswith(code.strip().lower()[: len(prefix) + 2])][:6] or known[:6]
    raise UsageError(
        f"{flag}: {code!r} is not in wattwise's table of grid carbon intensity (e.g. {', '.join(near)}); give a "
        "country code (ISO 3166-1, such as DE), gcp:/aws:/azure: and a region, a number in gCO2e/kWh, or a CSV series"
    )
