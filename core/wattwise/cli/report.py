"""`wattwise report RUN_DIR`: facility energy, emissions, cost and an energy statement for a finished run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wattwise.carbon.series import INTENSITY, PRICE, PUE, parse_series
from wattwise.record.files import read_run_dir
from wattwise.record.report import FacilityInputs, build_report, energy_statement, report_json, write_report


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise report` command to the `wattwise` parser."""
    parser = subparsers.add_parser(
        "report",
        help="energy report and paper-ready energy statement of a run (facility energy, emissions, cost)",
        description=(
            "Read a run directory (summary.json, power.csv) and write report.json, report.csv and "
            "energy_statement.md. Facility energy integrates the run's power timeline against the PUE, "
            "emissions against the grid's carbon intensity, each a number or a CSV `timestamp,value` "
            "series with timezone-aware timestamps covering the run. wattwise ships no regional default "
            "intensity: supply one (e.g. from your grid operator or Electricity Maps), or the report says "
            "'not supplied'. Prints the statement (or, with --json, the report)."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="directory the callback or plugin wrote")
    parser.add_argument("--pue", help="PUE: a number (e.g. 1.1) or a CSV series; default: not supplied (1.0)")
    parser.add_argument("--pue-source", help="where the PUE comes from, for the statement")
    parser.add_argument("--intensity", help="grid carbon intensity in gCO2e/kWh: a number or a CSV series")
    parser.add_argument("--intensity-source", help="where the intensity comes from, for the statement")
    parser.add_argument("--price", help="electricity price per kWh: a number or a CSV series")
    parser.add_argument("--price-source", help="where the price comes from, for the statement")
    parser.add_argument("--currency", help="currency of --price (e.g. EUR)")
    parser.add_argument("--region", help="where the run took place (e.g. 'eu-west-1, Ireland'), for the statement")
    parser.add_argument("--hardware", help="GPU model and count (e.g. '8x NVIDIA A100 80GB'), for the statement")
    parser.add_argument("--out", type=Path, help="where to write the report files (default: RUN_DIR)")
    parser.add_argument("--plot", type=Path, metavar="DIR", help="also write power and per-epoch plots (PNG) here")
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the run's dashboard page as one self-contained HTML file (needs the dashboard extra)",
    )
    parser.add_argument("--json", action="store_true", help="print the report JSON instead of the statement")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise report` with its parsed arguments.

    Returns:
        The exit status.
    """
    run_dir = read_run_dir(args.run_dir)
    inputs = FacilityInputs(
        pue=parse_series(args.pue, PUE, args.pue_source) if args.pue else None,
        intensity=parse_series(args.intensity, INTENSITY, args.intensity_source) if args.intensity else None,
        price=parse_series(args.price, PRICE, args.price_source) if args.price else None,
        currency=args.currency,
        region=args.region,
        hardware=args.hardware,
    )
    report = build_report(run_dir, inputs)
    written = write_report(report, args.out or args.run_dir)
    if args.plot:
        from wattwise.record.plot import plot_run

        written += plot_run(run_dir, args.plot)
    if args.html:
        from wattwise.dashboard.pages import write_run_html

        written.append(write_run_html(run_dir, args.html))
    print(report_json(report) if args.json else energy_statement(report), end="")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0
