"""`wattwise carbon codes`: the codes `--intensity` (and `carbon.intensity`) takes from the bundled table.

wattwise carbon codes                 # every country and cloud region, with its figure, year and source
wattwise carbon codes --provider gcp  # one provider's regions (country: the countries only)
wattwise carbon codes --search germany --json
"""

from __future__ import annotations

import argparse

from wattwise.carbon.grid import SOURCES, GridIntensity, table
from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.readable import RIGHT, Column, table_lines
from wattwise.safe_files import json_text
from wattwise.vocabulary import IntensityProvider as Provider


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise carbon` command to the `wattwise` parser."""
    parser = add_command(subparsers, "carbon")
    sub = parser.add_subparsers(dest="carbon_command", metavar="SUBCOMMAND", required=True)
    codes = sub.add_parser("codes", help="list the codes of the bundled table, with figure, year and source")
    codes.add_argument(
        "--provider",
        choices=[p.value for p in Provider],
        help="only the countries, or only one cloud provider's regions",
    )
    codes.add_argument("--search", help="only the codes whose code or place contains this text (any case)")
    codes.add_argument("--json", action="store_true", help="print the codes as JSON")
    codes.set_defaults(func=run_codes)


def provider_of(entry: GridIntensity) -> Provider:
    """Whose code `entry` is: a cloud provider's (`aws:...`) or a country's."""
    prefix, _, rest = entry.code.partition(":")
    return Provider(prefix.lower()) if rest else Provider.COUNTRY


def listed(provider: str | None = None, search: str | None = None) -> list[GridIntensity]:
    """The table's rows for `provider` whose code or place holds `search`, countries first, each by code."""
    wanted = search.strip().lower() if search else None
    rows = [
        entry
        for entry in table().values()
        if (provider is None or provider_of(entry) == provider)
        and (wanted is None or wanted in entry.code.lower() or wanted in entry.name.lower())
    ]
    order = list(Provider)
    return sorted(rows, key=lambda e: (order.index(provider_of(e)), e.code.lower()))


def run_codes(args: argparse.Namespace) -> int:
    """Run `wattwise carbon codes` with its parsed arguments.

    Returns:
        The exit status: 0, also when nothing matches (which it says).
    """
    if args.search is not None and not args.search.strip():
        raise UsageError("--search: give some text to look for (a code such as DE, or a place such as Germany)")
    rows = listed(args.provider, args.search)
    if args.json:
        print(
            json_text(
                {
                    "codes": [
                        {
                            "code": e.code,
                            "name": e.name,
                            "g_per_kwh": e.g_per_kwh,
                            "year": e.year,
                            "source": SOURCES[e.source],
                            "licence": e.licence,
                        }
                        for e in rows
                    ]
                }
            )
        )
        return 0
    if not rows:
        print("no code matches; `wattwise carbon codes` lists them all")
        return 0
    place = min(56, max(len(e.name) for e in rows))
    columns = (
        Column("code", max(len(e.code) for e in rows)),
        Column("place", place),
        Column("gCO2e/kWh", 9, RIGHT),
        Column("year", 4),
        Column("source"),
    )
    cells = [(e.code, e.name[:place], f"{e.g_per_kwh:.0f}", e.year, e.source) for e in rows]
    print("\n".join(table_lines(columns, cells, sep="  ")))
    used = sorted({e.source for e in rows})
    print("sources: " + "; ".join(f"{key}: {SOURCES[key]}" for key in used))
    print("use a code as --intensity CODE (wattwise report, the dashboard's $WATTWISE_INTENSITY) or carbon.intensity")
    return 0
