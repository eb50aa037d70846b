"""`wattwise runs list|show ID|compare ID ID...|forget ID|add DIR`: the run history (every run wattwise measured).

Each run is one row of the store that holds recurring jobs (`wattwise.store.runs`): `--store` (a SQLite file
path or a database URL), else `$WATTWISE_STORE`, else the SQLite file in wattwise's state directory. An ID
may be shortened to a prefix no other run's id has. `--json` prints JSON: `list` prints `{"runs": [...]}`,
each run the object of `wattwise.store.runs.RunDict` (a contract: its names stay), its `payback` the run's
one saving, tuning included, as the history keeps it (null for a run recorded before it did).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from wattwise.cli.main import add_command
from wattwise.errors import UsageError
from wattwise.project import default_project
from wattwise.readable import Column, columns_of, or_dash, table_lines
from wattwise.safe_files import json_text
from wattwise.store.compare import difference
from wattwise.store.runs import RunRow, UnreadableRun, forget_run, get_run, get_runs, list_history

if TYPE_CHECKING:
    from wattwise.profile import Payback
    from wattwise.record.summary import RunSummary

#: A day as `--since` takes it: a calendar date, midnight UTC.
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class StoreActions:
    """The actions of `wattwise runs` or `wattwise jobs`: each takes `--store` and `--json`, and runs one function."""

    actions: argparse._SubParsersAction
    #: The parent parser of every action: `--store` and `--json`.
    common: argparse.ArgumentParser

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> StoreActions:
        """The actions of the command `parser`, none yet: `add` adds them."""
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument(
            "--store", help="SQLite file path or database URL (default: $WATTWISE_STORE or the state dir)"
        )
        common.add_argument("--json", action="store_true", help="print JSON")
        return cls(actions, common)

    def add(self, name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        """Add the action `name`, run by `func`: its parser, for the action's own arguments."""
        action = self.actions.add_parser(name, parents=[self.common], help=help_text)
        action.set_defaults(func=func)
        return action


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise runs` command to the `wattwise` parser."""
    parser = add_command(subparsers, "runs")
    actions = StoreActions.of(parser)
    listing = actions.add("list", "the runs, oldest first, with their figures", run_list)
    listing.add_argument("--job", help="only this job's runs")
    listing.add_argument(
        "--since",
        help="only runs started since: a date (2026-12-01, UTC), an ISO time with a timezone, or a duration ago (7d)",
    )
    listing.add_argument("--status", help="only runs that ended so (completed, failed, interrupted)")
    listing.add_argument(
        "--project",
        nargs="?",
        const=".",
        help="only this project's runs; without a name (or '.'), the working directory's project "
        "(its git root's or folder's name)",
    )
    _one_run(actions, "show", "one run: every figure and its folder", run_show)
    compare = actions.add(
        "compare",
        "runs side by side: energy, time, power, limit; each difference from the first, and whether "
        "it is larger than the measurements' uncertainty",
        run_compare,
    )
    compare.add_argument("run_ids", metavar="ID", nargs="+", help="two or more run ids; the first is the reference")
    _one_run(actions, "forget", "remove a run from the history (its folder stays)", run_forget)
    add = actions.add(
        "add", "add a run's folder to the history (one whose row could not be recorded when it ended)", run_add
    )
    add.add_argument(
        "folder", metavar="DIR", help="the run's folder (OUTPUT/runs/ID, or OUTPUT), with its summary.json"
    )


def _one_run(actions: StoreActions, name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> None:
    """Add the action `name` of `wattwise runs`, which takes one run's ID."""
    actions.add(name, help_text, func).add_argument("run_id", metavar="ID", help="run id (see `wattwise runs list`)")


def parse_since(text: str, *, now_s: float) -> float:
    """`--since` in seconds since the epoch: a date (midnight UTC), an ISO time with a timezone, or a duration ago.

    Raises:
        UsageError: none of these, naming `--since` and the forms it takes.
    """
    from wattwise.carbon.series import parse_duration_s, parse_timestamp_s

    cleaned = text.strip()
    if _DATE.fullmatch(cleaned):
        try:
            day = date.fromisoformat(cleaned)
        except ValueError:
            raise UsageError(f"--since: {cleaned!r} is not a date (e.g. 2026-12-01)") from None
        return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp()
    if cleaned[:1].isdigit() and cleaned[-1:].lower() in "dhms" and "-" not in cleaned:
        return now_s - parse_duration_s(cleaned, flag="--since")
    if "T" in cleaned or " " in cleaned:
        return parse_timestamp_s(cleaned, where="--since")
    raise UsageError(
        f"--since: {cleaned!r} is neither a date (2026-12-01), an ISO time with a timezone "
        "(2026-12-01T14:00:00Z) nor a duration ago (7d, 12h)"
    )


def _source(row: RunRow) -> str:
    return "simulated" if row.simulated else "measured"


def _figure(value: float | None, unit: str, fmt: str = ".4g") -> str:
    return "-" if value is None else f"{value:{fmt}} {unit}"


def _energy(row: RunRow) -> str:
    from wattwise.record.summary import with_uncertainty

    return with_uncertainty(row.energy_j, row.energy_uncertainty_j, "J")


#: What marks a saving recorded before the history kept a run's one saving (`OLD_SAVING` says what it is).
OLD_MARK = "*"
#: `wattwise runs list`: a line per run.
LIST_COLUMNS = columns_of(
    "id:<24",
    "project:<16",
    "job:<20",
    "framework:<12",
    "mode:<7",
    "status:<11",
    "start (UTC):<19",
    "time (s):>9",
    "energy (J):>18",
    "limit (W):>9",
    "saved (J):>14",
    "figures:<9",
)
#: The line under `runs list` when a saving is marked `OLD_MARK`.
OLD_SAVING = (
    "* recorded before the history kept each run's one saving: the saving at the chosen limit over the steps "
    "run there, tuning's cost left out (`wattwise runs show ID` gives this run's, where its summary.json has it)"
)


def _saved(row: RunRow, summary: RunSummary | None = None) -> str:
    """The run's saving (J), with its uncertainty; "-" when none is claimed.

    This run's, tuning included (its payback: the figure its end-of-run text and `runs show` give), from
    `summary` when given, else from the history's row; a row recorded before the history kept it gives
    the saving it was recorded with, marked `OLD_MARK`.
    """
    from wattwise.readable import with_uncertainty

    payback = _payback(summary) or row.payback
    if payback is not None:
        return with_uncertainty(payback.run_energy_saved_j, payback.run_energy_saved_uncertainty_j)
    if row.saving_j is None:
        return "-"
    if row.saving_uncertainty_j is None:
        return f"{row.saving_j:.4g}{OLD_MARK}"
    return with_uncertainty(row.saving_j, row.saving_uncertainty_j) + OLD_MARK


def _start(row: RunRow) -> str:
    return row.start_time[:19].replace("T", " ")


def run_list(args: argparse.Namespace) -> int:
    """Run `wattwise runs list` with its parsed arguments.

    Returns:
        The exit status.
    """
    since = parse_since(args.since, now_s=time.time()) if args.since is not None else None
    project = default_project() if args.project == "." else args.project
    listing = list_history(job=args.job, since=since, status=args.status, project=project, location=args.store)
    rows = listing.runs
    if args.json:
        print(
            json_text(
                {"runs": [row.to_dict() for row in rows], "unreadable": [u.to_dict() for u in listing.unreadable]}
            )
        )
        return 0
    _say_unreadable(listing.unreadable)
    if not rows:
        print("no runs in the history" + (" that match" if args.job or args.since or args.status or project else ""))
        return 0
    cells = [
        (
            r.id,
            r.project or "-",
            r.job or "-",
            r.framework or "-",
            r.mode,
            r.status or "-",
            _start(r),
            f"{r.time_s:.4g}",
            _energy(r),
            or_dash(r.power_limit_w, "g"),
            _saved(r),
            _source(r),
        )
        for r in rows
    ]
    print("\n".join(table_lines(LIST_COLUMNS, cells)))
    if any(r.payback is None and r.saving_j is not None for r in rows):
        print(OLD_SAVING)
    return 0


def _say_unreadable(rows: Sequence[UnreadableRun]) -> None:
    """One line on stderr for each row of the history that does not read as a run."""
    for row in rows:
        print(f"wattwise runs: {row.line()}", file=sys.stderr)


def _show_lines(r: RunRow, summary: RunSummary | None = None) -> list[str]:
    from wattwise.record.summary import payback_lines

    saving = "-"
    paid = payback_lines(summary.power_limit) if summary is not None and summary.power_limit is not None else None
    if paid is not None:
        saving = f"\n{'':<13}".join(paid)
    elif r.payback is not None:  # its folder is gone: the history's figures of this run
        pb = r.payback
        when = "paid back" if pb.paid_back else "did not pay back"
        steps = f" (break-even {pb.break_even_steps} steps at the chosen limit)" if pb.break_even_steps else ""
        saving = f"this run: {_saved(r)} J, for {pb.run_time_added_s:+.3g} s, tuning included; tuning {when}{steps}"
    elif r.saving_j is not None:
        cost = f", for {r.time_cost_s:+.3g} s" if r.time_cost_s is not None else ", its time cost unknown"
        resolved = r.saving_uncertainty_j is None or abs(r.saving_j) > r.saving_uncertainty_j
        within = "" if resolved else " (within its uncertainty: not resolved)"
        saving = f"{_saved(r).removesuffix(OLD_MARK)} J against the highest limit{within}{cost}"
    return [
        f"run {r.id} ({_source(r)} figures)",
        f"  project    {r.project or '-'}",
        f"  job        {r.job or '-'}",
        f"  framework  {r.framework or '-'}",
        f"  mode       {r.mode}",
        f"  status     {r.status or '-'}",
        f"  start      {r.start_time}",
        f"  end        {r.end_time}",
        f"  devices    {', '.join(r.devices) or '-'}",
        f"  time       {r.time_s:.4g} s",
        f"  energy     {_energy(r)}",
        f"  power      {r.avg_power_w:.4g} W on average",
        f"  limit      {_figure(r.power_limit_w, 'W', 'g')}",
        f"  saving     {saving}",
        f"  folder     {r.folder}",
        f"  owner      {r.owner or '-'}",
    ]


def run_show(args: argparse.Namespace) -> int:
    """Run `wattwise runs show` with its parsed arguments.

    Returns:
        The exit status.
    """
    row = get_run(args.run_id, location=args.store)
    summary = summary_of(row)
    if args.json:
        from wattwise.codec import to_json_dict

        payback = _payback(summary)  # the whole of it; else the history's run figures (`row.to_dict`)
        print(json_text({**row.to_dict(), **({"payback": to_json_dict(payback)} if payback is not None else {})}))
    else:
        print("\n".join(_show_lines(row, summary)))
    return 0


def _percent(fraction: float | None) -> str:
    return "" if fraction is None else f" ({100 * fraction:+.1f}%)"


def compare_lines(rows: Sequence[RunRow]) -> list[str]:
    """The runs side by side, then each one's difference from the first."""
    summaries = [summary_of(r) for r in rows]
    physics = [_physics(r, s) for r, s in zip(rows, summaries, strict=True)]
    width = max(24, *(len(r.id) for r in rows))
    cells = {
        "job": [r.job or "-" for r in rows],
        "mode": [r.mode for r in rows],
        "status": [r.status or "-" for r in rows],
        "figures": [_source(r) + (f" ({p} physics)" if p else "") for r, p in zip(rows, physics, strict=True)],
        "energy": [_energy(r) for r in rows],
        "time": [f"{r.time_s:.4g} s" for r in rows],
        "power": [f"{r.avg_power_w:.4g} W" for r in rows],
        "limit": [_figure(r.power_limit_w, "W", "g") for r in rows],
        "saving": [_compared_saving(r, s) for r, s in zip(rows, summaries, strict=True)],
        "time cost": [_compared_time_cost(r, s) for r, s in zip(rows, summaries, strict=True)],
    }
    columns = (Column("", 10), *(Column(r.id, width) for r in rows))
    lines = table_lines(columns, [(name, *values) for name, values in cells.items()])
    reference = rows[0]
    for other in rows[1:]:
        d = difference(reference, other)
        verdict = d.verdict(
            unknown="the uncertainty of one run's energy is unknown",
            larger="larger than the measurements' uncertainty (±{u:.3g} J)",
            within="within the measurements' uncertainty (±{u:.3g} J): not a difference",
        )
        limit = f", limit {d.power_limit_w:+g} W" if d.power_limit_w is not None else ""
        lines.append(
            f"{other.id} - {reference.id}: energy {d.energy_j:+.4g} J{_percent(d.energy_fraction)}, {verdict}; "
            f"time {d.time_s:+.4g} s{_percent(d.time_fraction)}, power {d.avg_power_w:+.4g} W{limit}"
        )
    if any(r.simulated for r in rows):
        lines.append("simulated figures come from a power model, not a measurement")
    from wattwise.record.summary import mixed_physics

    mixed = mixed_physics([(r.simulated, p) for r, p in zip(rows, physics, strict=True)])
    if mixed:
        lines.append(mixed)
    return lines


def summary_of(row: RunRow) -> RunSummary | None:
    """The run's summary.json, read from its folder; None when the folder or the file is gone or unreadable."""
    from wattwise.record.files import read_summary
    from wattwise.record.summary import SUMMARY_FILE

    try:
        return read_summary(Path(row.folder) / SUMMARY_FILE)
    except (UsageError, OSError):
        return None


def _payback(summary: RunSummary | None) -> Payback | None:
    """What the run's tuning gained and cost (`power_limit.payback`); None when its summary does not say."""
    return summary.power_limit.payback if summary is not None and summary.power_limit is not None else None


def _compared_saving(row: RunRow, summary: RunSummary | None) -> str:
    """A comparison's saving cell: this run's, tuning included, where its summary gives it (as `_saved`)."""
    if _payback(summary) is None and row.payback is None:
        return _figure(row.saving_j, "J")
    return f"{_saved(row, summary)} J"


def _compared_time_cost(row: RunRow, summary: RunSummary | None) -> str:
    """A comparison's time-cost cell: the time this run added, tuning included, where its summary gives it."""
    payback = _payback(summary) or row.payback
    return _figure(row.time_cost_s if payback is None else payback.run_time_added_s, "s", "+.3g")


def _physics(row: RunRow, summary: RunSummary | None) -> str | None:
    """The simulated physics the run's summary.json records; None on hardware or when its folder is gone."""
    if not row.simulated or summary is None:
        return None
    from wattwise.record.summary import physics_of

    return physics_of(summary)


def run_compare(args: argparse.Namespace) -> int:
    """Run `wattwise runs compare` with its parsed arguments.

    Returns:
        The exit status.
    """
    if len(args.run_ids) < 2:
        raise UsageError("ID: give two or more runs to compare (see `wattwise runs list`)")
    rows = get_runs(args.run_ids, location=args.store)
    if args.json:
        payload = {
            "runs": [r.to_dict() for r in rows],
            "differences": [difference(rows[0], other).to_dict() for other in rows[1:]],
        }
        print(json_text(payload))
        return 0
    print("\n".join(compare_lines(rows)))
    return 0


def run_add(args: argparse.Namespace) -> int:
    """Run `wattwise runs add` with its parsed arguments: record the run in DIR as its end would have.

    The row's id is the folder's name when that is a run id (OUTPUT/runs/ID), else a new one.

    Returns:
        The exit status.
    """
    from pathlib import Path

    from wattwise.record.files import read_run_dir
    from wattwise.record.kept import run_row
    from wattwise.store.runs import KEPT_ROW, check_run_id, new_run_id, record_run

    folder = Path(args.folder)
    run = read_run_dir(folder)
    try:
        run_id = check_run_id(folder.resolve().name)
    except UsageError:
        run_id = new_run_id(run.summary.start_s)
    row = run_row(run.summary, run_id=run_id, folder=folder)
    spooled = record_run(row, location=args.store)
    (folder / KEPT_ROW).unlink(missing_ok=True)  # the row its end kept there, now recorded
    if args.json:
        print(json_text({"added": row.id, "folder": row.folder, "spooled": str(spooled) if spooled else None}))
    elif spooled is not None:
        print(f"run {row.id} waits in {spooled}: the store could not be reached (`wattwise jobs sync` delivers it)")
    else:
        print(f"added run {row.id} ({row.folder}) to the history")
    return 0


def run_forget(args: argparse.Namespace) -> int:
    """Run `wattwise runs forget` with its parsed arguments.

    Returns:
        The exit status.
    """
    row = forget_run(args.run_id, location=args.store)
    if args.json:
        print(json_text({"forgotten": row.id, "folder": row.folder}, indent=None))
    elif row.folder is None:
        print(f"forgot run {row.id} (its row was unreadable)")
    else:
        print(f"forgot run {row.id}; its folder {row.folder} is left as it is")
    return 0
