"""`wattwise jobs list|show NAME|reset NAME|forget-limit NAME|sync`: the jobs in the store and their history.

A job is a recurring job (its settings and runs), or any `job=` whose tuned power limits are remembered
(`wattwise.store.limits_memory`): `show` shows both, `forget-limit` forgets remembered limits.

The store is `--store` (a SQLite file path or a database URL), else `$WATTWISE_STORE`, else the
SQLite file in wattwise's state directory. Listing a store that does not exist yet creates nothing.
`sync` delivers the results spooled while the store was unreachable (`wattwise.store.spool`): your own
files only; one that is not a valid result is set aside, with one warning naming it and its field.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from sqlalchemy.engine import make_url

from wattwise.cli.main import add_command
from wattwise.cli.runs import StoreActions
from wattwise.copying import typed_dict_of
from wattwise.errors import UsageError
from wattwise.names import check_job_name
from wattwise.readable import columns_of, or_dash, table_lines
from wattwise.recurring.spec import JobSpec, StoredRun
from wattwise.recurring.summary import JobSummary, summarize
from wattwise.safe_files import json_text
from wattwise.store import spool
from wattwise.store.base import job_dict, unknown_job
from wattwise.store.factory import default_store_url, open_store, store_url
from wattwise.store.limits_memory import LimitsMemory, RememberedLimit, TuningProgress
from wattwise.vocabulary import MetricMode


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `wattwise jobs` command to the `wattwise` parser."""
    parser = add_command(subparsers, "jobs")
    actions = StoreActions.of(parser)
    actions.add("list", "every job with its run counts and totals", run_list)
    _one_job(actions, "show", "one job: settings, batch sizes, every run, remembered power limits", run_show)
    _one_job(actions, "reset", "forget a job and its whole history", run_reset)
    forget = actions.add(
        "forget-limit", "forget a job's remembered power limits, so that its next run profiles again", run_forget_limit
    )
    forget.add_argument("name", metavar="NAME", help="job name (see `wattwise jobs show NAME`)")
    forget.add_argument("--key", help="forget only this one (a key `wattwise jobs show NAME` lists); default: all")
    actions.add("sync", "deliver the run results spooled while the store was unreachable", run_sync)


def _one_job(actions: StoreActions, name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> None:
    """Add the action `name` of `wattwise jobs`, which takes one job's NAME."""
    actions.add(name, help_text, func).add_argument("name", metavar="NAME", help="job name (see `wattwise jobs list`)")


def _url(args: argparse.Namespace) -> str:
    return store_url(args.store) if args.store else default_store_url()


def _missing_sqlite_file(url: str) -> bool:
    parsed = make_url(url)
    database = parsed.database or ""
    return parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not Path(database).exists()


#: `wattwise jobs list`: a line per job.
JOBS_COLUMNS = columns_of("job:<32", "runs:>5", "reached:>7", "failed:>6", "open:>4", "best bs:>7", "energy (J):>12")
#: `wattwise jobs show`: the remembered limits, the batch sizes, the runs.
LIMITS_COLUMNS = columns_of("limit (W):>9", "step (s):>9", "step (J):>9", "profiled:>8", "chosen (UTC):<19", "key")
BATCH_SIZE_COLUMNS = columns_of(
    "batch:>6", "runs:>5", "reached:>7", "mean cost (J):>14", "mean epochs:>11", "limit (W):>9"
)
RUN_COLUMNS = columns_of("run:>5", "batch:>6", "phase:<10", "state:<8", "limit (W):>9", "epochs:>6", "cost (J):>10")


def _number(value: float | None) -> float | None:
    """JSON has no infinity: infinite and missing numbers are null."""
    return value if value is not None and math.isfinite(value) else None


class StoredRunDict(TypedDict):
    """One run of a recurring job, as `wattwise jobs show --json` lists it under `runs` (unknown figures null)."""

    run_id: int
    batch_size: int
    phase: str
    state: str
    power_limit_w: float | None
    epochs: int
    energy_j: float | None
    time_s: float | None
    cost: float | None
    #: null: no limit.
    cost_limit: float | None
    started_at_s: float
    updated_at_s: float


class RememberedLimitDict(TypedDict):
    """A remembered power limit, as `wattwise jobs show --json` lists it under `remembered_limits`."""

    key: str
    power_limit_w: float
    time_s: float
    energy_j: float
    profiled: int
    selector: str | None
    eta: float | None
    chosen_at_s: float | None
    run_id: str | None


class TuningProgressDict(TypedDict):
    """An unfinished tuning, as `wattwise jobs show --json` lists it under `tuning_progress`."""

    key: str
    profiled: int
    limits: int
    updated_at_s: float
    run_id: str | None


def _run_dict(run: StoredRun) -> StoredRunDict:
    return typed_dict_of(StoredRunDict, run, cost_limit=_number(run.cost_limit))


def run_list(args: argparse.Namespace) -> int:
    """Run `wattwise jobs list` with its parsed arguments.

    Returns:
        The exit status.
    """
    url = _url(args)
    summaries: list[JobSummary] = []
    if not _missing_sqlite_file(url):
        store = open_store(url)
        try:
            summaries = [summarize(s, store.runs(s.name), store.power_limits(s.name)) for s in store.list_jobs()]
        finally:
            store.close()
    if args.json:
        print(json_text({"store": make_url(url).render_as_string(), "jobs": [s.to_dict() for s in summaries]}))
        return 0
    if not summaries:
        print(f"no recurring jobs in {make_url(url).render_as_string()}")
        return 0
    rows = [(s.name, s.runs, s.reached, s.failed, s.open, s.best_batch_size, f"{s.energy_j:.4g}") for s in summaries]
    print("\n".join(table_lines(JOBS_COLUMNS, rows)))
    return 0


def _limit_dict(key: str, limit: RememberedLimit) -> RememberedLimitDict:
    return RememberedLimitDict(
        key=key,
        power_limit_w=limit.chosen.power_limit_w,
        time_s=limit.chosen.time_s,
        energy_j=limit.chosen.energy_j,
        profiled=len(limit.profile),
        selector=limit.selector,
        eta=limit.eta,
        chosen_at_s=limit.chosen_at_s,
        run_id=limit.run_id,
    )


def _print_limits(name: str, limits: dict[str, RememberedLimit]) -> None:
    print(f"remembered power limits ({len(limits)}; `wattwise jobs forget-limit {name}` forgets them):")
    from wattwise.carbon.series import format_utc

    rows = []
    for key, limit in limits.items():
        when = format_utc(limit.chosen_at_s)[:19].replace("T", " ") if limit.chosen_at_s is not None else "-"
        chosen = limit.chosen
        rows.append(
            (
                f"{chosen.power_limit_w:g}",
                f"{chosen.time_s:.4g}",
                f"{chosen.energy_j:.4g}",
                len(limit.profile),
                when,
                key,
            )
        )
    print("\n".join(table_lines(LIMITS_COLUMNS, rows, indent="  ")))


def run_show(args: argparse.Namespace) -> int:
    """Run `wattwise jobs show` with its parsed arguments.

    A recurring job: its settings, batch sizes and runs; any job: the power limits remembered for it.

    Returns:
        The exit status.
    """
    url = _named_job_store(args)
    store = open_store(url)
    try:
        spec = store.get_job(args.name)
        runs = store.runs(spec.name) if spec is not None else []
        summary = summarize(spec, runs, store.power_limits(spec.name)) if spec is not None else None
    finally:
        store.close()
    memory = LimitsMemory(url)
    limits, progress = memory.remembered(args.name), memory.progress(args.name)
    if spec is None and not limits and not progress:
        raise unknown_job(args.name)
    if args.json:
        payload = {
            "job": job_dict(spec) if spec is not None else None,
            "summary": summary.to_dict() if summary is not None else None,
            "runs": [_run_dict(r) for r in runs],
            "remembered_limits": [_limit_dict(key, limit) for key, limit in limits.items()],
            "tuning_progress": [_progress_dict(key, p) for key, p in progress.items()],
        }
        print(json_text(payload))
        return 0
    if spec is None or summary is None:
        print(f"job {args.name}: not a recurring job")
    else:
        _print_recurring(spec, summary, runs)
    if limits:
        _print_limits(args.name, limits)
    if progress:
        _print_progress(progress)
    return 0


def _progress_dict(key: str, progress: TuningProgress) -> TuningProgressDict:
    return TuningProgressDict(
        key=key,
        profiled=progress.profiled,
        limits=progress.limits,
        updated_at_s=progress.updated_at_s,
        run_id=progress.run_id,
    )


def _print_progress(progress: dict[str, TuningProgress]) -> None:
    print(f"unfinished power-limit tuning ({len(progress)}; the job's next run goes on from it):")
    for key, p in progress.items():
        print(f"  profiling: {p.profiled} of {p.limits} limits   {key}")


def _print_recurring(spec: JobSpec, summary: JobSummary, runs: list[StoredRun]) -> None:
    print(
        f"job {spec.name}: metric {'>=' if spec.metric_mode is MetricMode.MAX else '<='} {spec.target_metric:g} within "
        f"{spec.max_epochs} epochs, "
        f"eta {spec.eta:g}, beta {spec.beta:g}, max power {spec.max_power_w:g} W, default batch size "
        f"{spec.default_batch_size}"
    )
    print(
        f"{summary.runs} runs ({summary.reached} reached, {summary.failed} failed, {summary.open} open); "
        f"{summary.energy_j:.4g} J, {summary.time_s:.4g} s; best batch size so far {summary.best_batch_size}"
    )
    sizes = [
        (
            b.batch_size,
            b.runs,
            b.reached,
            or_dash(b.mean_reached_cost, ".4g"),
            or_dash(b.mean_reached_epochs, ".3g"),
            or_dash(b.power_limit_w, "g"),
        )
        for b in summary.batch_sizes
    ]
    print("\n".join(table_lines(BATCH_SIZE_COLUMNS, sizes)))
    if runs:
        rows = [
            (
                r.run_id,
                r.batch_size,
                r.phase,
                r.state,
                or_dash(r.power_limit_w, "g"),
                r.epochs,
                or_dash(r.cost, ".4g"),
            )
            for r in runs
        ]
        print("\n".join(table_lines(RUN_COLUMNS, rows)))


def _named_job_store(args: argparse.Namespace) -> str:
    """The store of a command naming one job (`NAME`, checked): its URL, refused when a SQLite file is missing.

    Raises:
        UsageError: `NAME` is no job name, or the store's file does not exist (so the job is unknown).
    """
    check_job_name(args.name, setting="NAME")
    url = _url(args)
    if _missing_sqlite_file(url):
        raise unknown_job(args.name)
    return url


def run_reset(args: argparse.Namespace) -> int:
    """Run `wattwise jobs reset` with its parsed arguments.

    Returns:
        The exit status.
    """
    url = _named_job_store(args)
    store = open_store(url)
    try:
        from wattwise.store.sql import UnreadableJob

        try:
            found = store.get_job(args.name) is not None
        except UnreadableJob:  # a job whose row does not read is reset all the same
            found = True
        runs = len(store.runs(args.name)) if found else None
        if runs is None or not store.reset_job(args.name):
            raise unknown_job(args.name)
    finally:
        store.close()
    if args.json:
        print(json_text({"reset": args.name, "runs_forgotten": runs}, indent=None))
    else:
        print(f"forgot job {args.name} and its {runs} runs")
    return 0


def run_forget_limit(args: argparse.Namespace) -> int:
    """Run `wattwise jobs forget-limit` with its parsed arguments.

    Returns:
        The exit status.
    """
    check_job_name(args.name, setting="NAME")
    url = _url(args)
    if _missing_sqlite_file(url):
        raise UsageError(f"no power limit remembered for job {args.name!r} (see `wattwise jobs show {args.name}`)")
    memory = LimitsMemory(url)
    keys = list(memory.remembered(args.name))
    if args.key is not None:
        if args.key not in keys:
            raise UsageError(
                f"--key: {args.key!r} is not a limit remembered for job {args.name!r}; "
                f"`wattwise jobs show {args.name}` lists them"
            )
        keys = [args.key]
    if not keys:
        raise UsageError(f"no power limit remembered for job {args.name!r} (see `wattwise jobs show {args.name}`)")
    forgotten = [key for key in keys if memory.forget(key)]
    if args.json:
        print(json_text({"job": args.name, "forgotten": forgotten}, indent=None))
    else:
        print(
            f"forgot {len(forgotten)} remembered power limit(s) of job {args.name}; its next tuned run profiles again"
        )
    return 0


def run_sync(args: argparse.Namespace) -> int:
    """Run `wattwise jobs sync` with its parsed arguments.

    Returns:
        The exit status.
    """
    url = _url(args)
    waiting, set_aside = len(spool.pending(url)), len(spool.rejected(url))
    if waiting or spool.not_yours(url):
        open_store(url).close()  # opening the store delivers what was spooled for it (and names the rest)
    left, rejected = len(spool.pending(url)), len(spool.rejected(url)) - set_aside
    delivered, shown = waiting - left - rejected, make_url(url).render_as_string()
    if args.json:
        print(json_text({"store": shown, "delivered": delivered, "rejected": rejected, "pending": left}, indent=None))
    elif waiting:
        print(f"delivered {delivered} spooled results to {shown}; {rejected} set aside, {left} still pending")
    else:
        print(f"no spooled results for {shown}")
    return 0
