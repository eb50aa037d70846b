"""Results waiting for an unreachable store: `StoreUnavailable`, and the spool that keeps them on disk.

Two kinds wait here: a recurring run's result (`SpooledResult`) and a run of the history
(`wattwise.store.history.RunRow`, spooled by `spool_run` with `"kind": "run_history"`).
A run's result is the one thing a recurring run cannot recompute, so when the store stays unreachable
(PostgreSQL stopped, a SQLite file locked or unwritable) after the store's brief retries, the result is
written here instead: one JSON file per pending result, in a folder of the state directory per store
URL (`spool/<hash of the URL>/`, the URL itself is not written: it may hold a password), owner-only
(0600 in 0700 folders), each file written whole through a temporary and `os.replace`. The store
delivers them the next time it is opened (`SqlJobStore.deliver_spooled`, also `wattwise jobs sync`)
and removes a file only once the write is committed. Delivery is keyed by run id: a run that already
has its result is left as it is, so a result delivered twice is recorded once.

The folder's name is a hash anyone can compute, so in a shared `WATTWISE_HOME` another user can put files
there. A file is delivered only when it is the running user's own regular file (`wattwise.safe_files.read_trusted`:
never followed through a link) and every field is what a run gives the store (`SpooledResult.from_dict`,
the bounds of `wattwise.store.base.check_run_figures`). Another user's file is left where it is (it is
theirs to deliver); one of the user's own that fails is set aside as `NAME.rejected`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise.bounds import check_integer
from wattwise.errors import Unavailable, UsageError
from wattwise.names import check_job_name
from wattwise.safe_files import (
    file_owner,
    owner_problem,
    private_dir,
    private_folder_problem,
    read_trusted_json,
    state_dir,
    write_text,
)
from wattwise.store.base import MAX_INTEGER, check_power_limit, check_run_figures

if TYPE_CHECKING:
    from wattwise.store.history import RunRow

SPOOL_VERSION = 1
#: The `kind` of a spooled run of the history (a recurring run's result has no `kind`).
RUN_HISTORY_KIND = "run_history"
#: A spooled result is a few hundred bytes; a larger file is not one.
MAX_SPOOL_BYTES = 1 << 16


class StoreUnavailable(Unavailable):
    """The store could not be reached (or stayed locked) for longer than its retries allow.

    `url` is the store's URL, `reason` the database's own words.
    """

    def __init__(self, message: str, *, url: str, reason: str) -> None:
        super().__init__(message)
        self.url = url
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class SpooledResult:
    """A run's result as `BatchSizeOptimizer.report_result` was given it.

    `epochs` None: the epochs the store has for the run. `energy_j` and `cost` None: nothing was measured.
    `power_limit_w`: the limit the run's tuning chose, remembered for the run's batch size with the result.
    """

    job: str
    run_id: int
    reached: bool
    epochs: int | None
    energy_j: float | None
    time_s: float
    cost: float | None
    now_s: float
    power_limit_w: float | None = None

    def to_json(self) -> str:
        """The spool file's text: the fields and the spool format's version."""
        return json.dumps({"version": SPOOL_VERSION, **dataclasses.asdict(self)}, indent=1)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpooledResult:
        """The result in a spool file's JSON object (with its `version`), checked field by field.

        Raises:
            UsageError: not this spool format's version, a field missing or unknown, or a field of the wrong
                type or outside its bound (the bounds every store accepts from a run); the message names it.
        """
        version = data.get("version")
        if type(version) is not int or version != SPOOL_VERSION:
            raise UsageError(
                f"version must be {SPOOL_VERSION} (got {version!r}): not a spooled result this wattwise reads"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields) - {"version"})
        if unknown:
            raise UsageError(f"{unknown[0]} is not a field of a spooled result")
        missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING]
        if missing:
            raise UsageError(f"{missing[0]} is missing")
        result = cls(**{name: data[name] for name in fields if name in data})
        check_job_name(result.job, setting="job")
        check_integer(result.run_id, "run_id", low=1, high=MAX_INTEGER)
        if not isinstance(result.reached, bool):
            raise UsageError(f"reached must be true or false (got {result.reached!r})")
        check_run_figures(
            epochs=result.epochs, energy_j=result.energy_j, time_s=result.time_s, cost=result.cost, now_s=result.now_s
        )
        if result.reached and result.epochs == 0:
            raise UsageError("epochs must be at least 1 for a run that reached the target (got 0)")
        if result.power_limit_w is not None:
            check_power_limit(result.power_limit_w)
        return result


def spool_dir(url: str) -> Path:
    """Where results for the store at `url` wait: a folder of the state directory named by the URL's hash."""
    return state_dir() / "spool" / hashlib.sha256(url.encode()).hexdigest()[:16]


def own_spool_dir(url: str) -> Path:
    """The spool folder for the store at `url`, created 0700 when missing and checked to be yours.

    Its name is a hash anyone can compute, so in a shared `WATTWISE_HOME` another user could make it (or
    its parent) first and then delete or read what is spooled there: a folder that is not the user's own
    (or a parent writable by others without the sticky bit) is refused, as the settings journal's is.

    Raises:
        PermissionError: the folder or its parent is not the user's own; the message names it and the fix.
    """
    directory = private_dir(spool_dir(url))
    problem = private_folder_problem(directory)
    if problem is None:
        with contextlib.suppress(OSError):
            problem = owner_problem("its parent folder", os.stat(directory.parent), sticky_ok=True)
    if problem is not None:
        raise PermissionError(
            errno.EPERM,
            f"spool folder {directory}: {problem}; nothing is spooled there (remove it, or set WATTWISE_HOME "
            "to a folder of your own)",
        )
    return directory


def spool_result(url: str, result: SpooledResult) -> Path:
    """Write `result` for the store at `url` as a new owner-only file; its path.

    Raises:
        OSError: the file cannot be written, or the spool folder is not the user's own (`own_spool_dir`).
    """
    directory = own_spool_dir(url)
    path = directory / f"{time.time_ns():020d}-run{result.run_id}.json"
    write_text(path, result.to_json(), mode=0o600)
    return path


def spool_run(url: str, row: RunRow) -> Path:
    """Write a run of the history for the store at `url` as a new owner-only file; its path.

    Raises:
        OSError: as for `spool_result`.
    """
    directory = own_spool_dir(url)
    path = directory / f"{time.time_ns():020d}-history-{row.id}.json"
    write_run_file(path, row)
    return path


def write_run_file(path: Path, row: RunRow) -> None:
    """Write a run of the history to `path` as a spool file holds it (owner-only; `read` reads it back).

    Raises:
        OSError: the file cannot be written.
    """
    payload = {"version": SPOOL_VERSION, "kind": RUN_HISTORY_KIND, **row.to_dict()}
    write_text(path, json.dumps(payload, indent=1), mode=0o600)


def _entries(url: str) -> list[Path]:
    """Every spool file for the store at `url` (links included), by name, so oldest first.

    None in a folder that cannot be listed.
    """
    try:
        names = sorted(os.listdir(spool_dir(url)))
    except OSError:
        return []
    return [spool_dir(url) / name for name in names if name.endswith(".json") and not name.startswith(".")]


def pending(url: str) -> list[Path]:
    """The files waiting for the store at `url` that are yours to deliver, oldest first.

    Another user's files in a shared state directory are theirs (`not_yours`).
    """
    uid = os.geteuid()
    return [path for path in _entries(url) if file_owner(path) == uid]


def not_yours(url: str) -> list[Path]:
    """The files waiting for the store at `url` that belong to other users: never delivered by you."""
    uid = os.geteuid()
    return [path for path in _entries(url) if file_owner(path) not in (uid, None)]


def rejected(url: str) -> list[Path]:
    """The files set aside for the store at `url` (`wattwise.safe_files.set_aside`)."""
    directory = spool_dir(url)
    return sorted(directory.glob("*.rejected")) if directory.is_dir() else []


def read(path: Path) -> SpooledResult | RunRow:
    """The result (or run of the history) in a spooled file, read only when the file is yours, checked field by field.

    Raises:
        FileNotFoundError: it is gone (another process delivered it).
        UntrustedFile: not a regular file of yours (a link, another user's file); `owner_uid` says whose.
        ValueError: not JSON, or not a spooled result (a `UsageError` naming the field).
    """
    data = read_trusted_json(path, max_bytes=MAX_SPOOL_BYTES)
    if data.get("kind") == RUN_HISTORY_KIND:
        from wattwise.store.history import RunRow

        version = data.get("version")
        if type(version) is not int or version != SPOOL_VERSION:
            raise UsageError(
                f"version must be {SPOOL_VERSION} (got {version!r}): not a spooled run this wattwise reads"
            )
        fields = {k: v for k, v in data.items() if k not in ("version", "kind")}
        return RunRow.from_dict(fields, where="spooled run")
    return SpooledResult.from_dict(data)


def remove(path: Path) -> None:
    """A delivered file (already gone when another process delivered it too)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
