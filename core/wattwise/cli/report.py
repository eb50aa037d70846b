"""`wattwise report RUN_DIR`: facility energy, emissions, cost and an energy statement for a finished run.

`wattwise report --job NAME` sums every run of a job in the run history (`wattwise.record.job_report`);
`--statement eu-ai-act` writes the statement as the EU AI Act's energy disclosure (Annex XI, 1.2(e)).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wattwise.carbon.series import INTENSITY_ENV, PRICE, PUE, intensity_given, parse_series
from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.record.files import read_run_dir
from wattwise.record.report import (
    FacilityInputs,
    build_report,
    carry_inputs,
    energy_statement,
    report_json,
    write_report,
)
from wattwise.vocabulary import StatementKind


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise report` command to the `wattwise` parser."""
    parser = add_command(subparsers, "report")
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", type=Path, nargs="?", help="directory the callback or plugin wrote"
    )
    parser.add_argument("--job", help="instead of RUN_DIR: every run of this job in the run history, summed")
    parser.add_argument("--store", help="with --job: the store (default: $WATTWISE_STORE or the state dir)")
    parser.add_argument(
        "--statement",
        choices=tuple(StatementKind),
        default=StatementKind.PAPER,
        help="the statement's form: a paper's (default), or the EU AI Act's energy disclosure (Annex XI, 1.2(e))",
    )
    parser.add_argument("--pue", help="PUE: a number (e.g. 1.1) or a CSV series; default: not supplied (1.0)")
    parser.add_argument("--pue-source", help="where the PUE comes from, for the statement")
    parser.add_argument(
        "--intensity",
        help="grid carbon intensity in gCO2e/kWh: a number, a CSV series, or a code of the bundled table "
        f"(DE, gcp:europe-west1); default: ${INTENSITY_ENV}",
    )
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
    if args.job is not None:
        from wattwise.record.job_report import report_job
        from wattwise.store.runs import list_history

        listing = list_history(job=args.job, location=args.store)
        for unreadable in listing.unreadable:  # not in the totals: said, so that they are not taken as whole
            print(f"wattwise report: {unreadable.line()}; the totals leave it out", file=sys.stderr)
        rows = listing.runs
        return report_job(args.job, _inputs(args), rows=rows, statement=args.statement, as_json=args.json, out=args.out)
    if args.run_dir is None:
        raise UsageError("RUN_DIR: give the folder of a run, or --job NAME for every run of a job")
    if args.html:  # refused before any report file is written
        from wattwise.safe_files import check_writable_target

        if args.html.is_dir():
            raise UsageError(
                f"--html {args.html} is a directory; name the file to write, e.g. {args.html / 'run.html'}"
            )
        check_writable_target(args.html, flag="--html")
    run_dir = read_run_dir(args.run_dir)
    out = args.out or args.run_dir
    inputs, carried = carry_inputs(_inputs(args), out)
    if carried:
        flags = " or ".join(c.split()[0] for c in carried)
        print(
            f"wattwise report: kept {'; '.join(carried)}: the report already in {out} was made with them "
            f"(give {flags} to change)",
            file=sys.stderr,
        )
    report = build_report(run_dir, inputs)
    for line in report.odd:  # possible, so reported; said, so that it is checked
        print(f"wattwise report: odd: {line}", file=sys.stderr)
    written = write_report(report, out)
    if args.plot:
        from wattwise.record.plot import plot_run

        written += plot_run(run_dir, args.plot)
    if args.html:
        from wattwise.dashboard.pages import write_run_html

        written.append(write_run_html(run_dir, args.html, report=report))
    if args.json:
        print(report_json(report), end="")
    elif args.statement == StatementKind.EU_AI_ACT:
        from wattwise.record.job_report import eu_ai_act_statement, job_report

        print(eu_ai_act_statement(job_report(None, [report])), end="")
    else:
        print(energy_statement(report), end="")
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


#: The flags that take text for the report and its statement, each one line of printable text when given.
_TEXT_FLAGS = (
    "pue",
    "pue_source",
    "intensity",
    "intensity_source",
    "price",
    "price_source",
    "currency",
    "region",
    "hardware",
)


def _check_text_flags(args: argparse.Namespace) -> None:
    """Refuse a text flag given empty (`--intensity ''`) or holding a line break or a terminal escape.

    An empty value was taken as "not given" without a word; a line break would add lines to the statement.
    """
    for name in _TEXT_FLAGS:
        value = getattr(args, name, None)
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if not value.strip():
            raise UsageError(f"{flag} is empty; give a value, or leave {flag} out")
        if not value.isprintable():
            raise UsageError(f"{flag} must be one line of printable text (got {value[:40]!r}); remove line breaks")


def _inputs(args: argparse.Namespace) -> FacilityInputs:
    """The facility inputs the flags give (PUE, intensity, price, where, what)."""
    _check_text_flags(args)
    return FacilityInputs(
        pue=parse_series(args.pue, PUE, args.pue_source) if args.pue else None,
        intensity=intensity_given(args.intensity, args.intensity_source),
        price=parse_series(args.price, PRICE, args.price_source) if args.price else None,
        currency=args.currency,
        region=args.region,
        hardware=args.hardware,
    )
