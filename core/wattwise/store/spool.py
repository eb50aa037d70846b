"""Results waiting for an unreachable store: `StoreUnavailable`, and the spool that keeps them on disk.

A run's result is the one thing a recurring run cannot recompute, so when the store stays unreachable
(PostgreSQL stopped, a SQLite file locked or unwritable) after the store's brief retries, the result is
written here instead: one JSON file per pending result, in a folder of the state directory per store
URL (`spool/<hash of the URL>/`, the URL itself is not written: it may hold a password), owner-only
(0600 in 0700 folders), each file written whole through a temporary and `os.replace`. The store
delivers them the next time it is opened (`SqlJobStore.deliver_spooled`, also `wattwise jobs sync`)
and removes a file only once the write is committed. Delivery is keyed by run id: a run that already
has its result is left as it is, so a result delivered twice is recorded once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from wattwise.errors import Unavailable
from wattwise.paths import private_dir, state_dir, write_text

SPOOL_VERSION = 1


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

    `epochs` None: the epochs the store has for the run. `power_limit_w`: the limit the run's tuning
    chose, remembered for the run's batch size with the result.
    """

    job: str
    run_id: int
    reached: bool
    epochs: int | None
    energy_j: float
    time_s: float
    cost: float
    now_s: float
    power_limit_w: float | None = None

    def to_json(self) -> str:
        """The spool file's text: the fields and the spool format's version."""
        return json.dumps({"version": SPOOL_VERSION, **dataclasses.asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> SpooledResult:
        """The result in a spool file's text.

        Raises:
            ValueError: not JSON, or not this spool format's version.
            TypeError: fields this version does not know, or missing ones.
        """
        data: dict[str, Any] = json.loads(text)
        if data.pop("version", None) != SPOOL_VERSION:
            raise ValueError(f"not a version {SPOOL_VERSION} spooled result")
        return cls(**data)


def spool_dir(url: str) -> Path:
    """Where results for the store at `url` wait: a folder of the state directory named by the URL's hash."""
    return state_dir() / "spool" / hashlib.sha256(url.encode()).hexdigest()[:16]


def spool_result(url: str, result: SpooledResult) -> Path:
    """Write `result` for the store at `url` as a new owner-only file; its path."""
    directory = private_dir(spool_dir(url))
    path = directory / f"{time.time_ns():020d}-run{result.run_id}.json"
    write_text(path, result.to_json(), mode=0o600)
    return path


def pending(url: str) -> list[Path]:
    """The files waiting for the store at `url`, oldest first."""
    directory = spool_dir(url)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.suffix == ".json" and not p.name.startswith("."))


def rejected(url: str) -> list[Path]:
    """The files set aside for the store at `url` (`set_aside`)."""
    directory = spool_dir(url)
    return sorted(directory.glob("*.rejected")) if directory.is_dir() else []


def read(path: Path) -> SpooledResult:
    """The result in a spooled file (ValueError, OSError when it cannot be read)."""
    try:
        return SpooledResult.from_json(path.read_text(encoding="utf-8"))
    except TypeError as err:
        raise ValueError(f"unexpected fields: {err}") from err


def set_aside(path: Path) -> Path:
    """Rename a file that cannot be delivered to `NAME.rejected`, out of the way of later deliveries."""
    rejected = path.with_name(path.name + ".rejected")
    os.replace(path, rejected)
    return rejected


def remove(path: Path) -> None:
    """A delivered file (already gone when another process delivered it too)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
