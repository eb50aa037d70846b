"""Remembered power-limit choices, so the next run of the same job does not profile again.

They live in the store every other piece of history lives in (`wattwise.store.sql`: the
SQLite file `jobs.sqlite` in the state directory by default, else `$WATTWISE_STORE` or the location
given, PostgreSQL by URL), one row per key of `memory_key`. The key includes the GPU model and count (a
choice made on A40s says nothing about H100s) and, for recurring jobs, the batch size. Each row also
keeps the selector and eta that chose the limit, when, and in which run, so a reused limit can be
reported with them.

wattwise 0.1.0 kept them in `<state dir>/power_limits.json`. The first use of the store on a machine
that has that file imports it (an entry replaces the store's only when it was chosen later) and
renames it `power_limits.json.imported`, under the file lock 0.1.0 writes it under, so nothing is lost
even while an old version runs beside a new one. The file is imported only when it is the user's own
regular file (`wattwise.safe_files.read_trusted`: never followed through a link; another user's file in a
shared state directory is left alone), and each entry only when every field is a plausible tuning result
(`wattwise.bounds`); what fails is named in one warning.

SQLAlchemy and the SQL store are imported when the store is first used, not with this module: every
`wattwise.run.Run` holds a `LimitsMemory`, and a run that only measures never opens it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise.bounds import ENERGY_J, POWER_LIMIT_W, TIME_S, TIMESTAMP_S
from wattwise.codec import is_number
from wattwise.errors import UsageError, plugin_warning
from wattwise.power_limit import check_eta
from wattwise.profile import ProfileEntry
from wattwise.safe_files import (
    UntrustedFile,
    open_lock,
    read_trusted_json,
    set_aside_if_mine,
    state_dir,
    trust_problem,
)
from wattwise.store.factory import default_store_url, store_url

if TYPE_CHECKING:
    from sqlalchemy import Connection, Row, Table

    from wattwise.store.sql import SqlJobStore

log = logging.getLogger(__name__)

#: wattwise 0.1.0's file of remembered limits, in the state directory.
LEGACY_FILE = "power_limits.json"
#: The largest such file imported: about 30,000 entries.
MAX_LEGACY_BYTES = 16 << 20
#: The longest key and selector name the store keeps (its `selector` column is 32 characters wide).
MAX_KEY_CHARS, MAX_SELECTOR_CHARS = 1024, 32


def memory_key(job: str, gpu_name: str, num_gpus: int, batch_size: int | None = None) -> str:
    """The key a tuning result is remembered under.

    A choice made for one job on one GPU model and count says nothing about another, nor (for a
    recurring job) about another batch size.

    Args:
        job: The job's name.
        gpu_name: The GPU model, as the device reports it.
        num_gpus: How many GPUs the run uses.
        batch_size: A recurring job's batch size; None for any other job.

    Returns:
        `job|gpu_name|xN`, with `|bs=B` when a batch size is given.
    """
    key = f"{job}|{gpu_name}|x{num_gpus}"
    return key if batch_size is None else f"{key}|bs={batch_size}"


@dataclasses.dataclass(frozen=True)
class RememberedLimit:
    """A tuning run's result: the chosen entry, the whole profile, and what chose it (None: unknown)."""

    chosen: ProfileEntry
    profile: list[ProfileEntry]
    selector: str | None = None
    eta: float | None = None
    #: Seconds since the epoch.
    chosen_at_s: float | None = None
    #: The run that chose it, as its caller names runs.
    run_id: str | None = None


class LimitsMemory:
    """Tuning results remembered in the store, by `memory_key`. Each call opens the store and closes it.

    Args:
        location: A SQLite file path or a database URL; None: `$WATTWISE_STORE`, else the default file.

    Raises:
        UsageError: `location` (or `$WATTWISE_STORE`) is not a store location (nothing is opened yet).
    """

    def __init__(self, location: str | None = None, *, read_only: bool = False) -> None:
        #: The store: `location` (a SQLite file path or a URL), else `$WATTWISE_STORE`, else the default file.
        self.url = store_url(location) if location else default_store_url()
        #: A reader's (the dashboard's): the store is opened read-only, nothing is imported or written.
        self.read_only = read_only

    @contextmanager
    def _store(self) -> Iterator[SqlJobStore]:
        from wattwise.store.sql import SqlJobStore

        store = SqlJobStore(self.url, read_only=self.read_only)
        try:
            if not self.read_only:
                import_legacy_file(store, state_dir() / LEGACY_FILE)
            yield store
        finally:
            store.close()

    def _row(self, table: Table, key: str) -> Row[Any] | None:
        """The row of `table` kept under `key`, or None (`StoreUnavailable`: the store cannot be reached)."""
        from sqlalchemy import select

        with self._store() as store:
            return store.read(lambda conn: conn.execute(select(table).where(table.c.memory_key == key)).first())

    def _job_rows(self, table: Table, job: str) -> Sequence[Row[Any]]:
        """Every row of `table` kept for `job` (`_job_keys`), by key."""
        from sqlalchemy import select

        prefix = _job_keys(job)
        with self._store() as store:
            return store.read(
                lambda conn: conn.execute(
                    select(table).where(table.c.memory_key.like(prefix, escape="\\")).order_by(table.c.memory_key)
                ).all()
            )

    def recall(self, key: str) -> RememberedLimit | None:
        """Everything remembered under `key`, or None.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        from wattwise.store.schema import remembered_limits_table

        row = self._row(remembered_limits_table, key)
        return None if row is None else _remembered(row)

    def load(self, key: str) -> tuple[ProfileEntry, list[ProfileEntry]] | None:
        """(chosen entry, whole profile) remembered under `key`, or None."""
        found = self.recall(key)
        return None if found is None else (found.chosen, found.profile)

    def save(
        self,
        key: str,
        chosen: ProfileEntry,
        profile: list[ProfileEntry],
        *,
        selector: str | None = None,
        eta: float | None = None,
        run_id: str | None = None,
        chosen_at_s: float | None = None,
    ) -> None:
        """Remember a tuning result under `key`, replacing any earlier one.

        Args:
            key: From `memory_key`.
            chosen: The profile entry the selector chose.
            profile: Every limit measured.
            selector: The selector that chose (e.g. "zeus").
            eta: The selector's eta, when it has one.
            run_id: The run that chose, as its caller names runs.
            chosen_at_s: When, in seconds since the epoch; None: now.
        """
        limit = RememberedLimit(
            chosen, list(profile), selector, eta, time.time() if chosen_at_s is None else chosen_at_s, run_id
        )
        from sqlalchemy import delete

        from wattwise.store.schema import tuning_progress_table

        def work(conn: Connection) -> None:
            _upsert(conn, key, limit, only_if_later=False)
            conn.execute(delete(tuning_progress_table).where(tuning_progress_table.c.memory_key == key))

        with self._store() as store:
            store.write(work)

    def remembered(self, job: str) -> dict[str, RememberedLimit]:
        """Every limit remembered for `job` (any GPU model and count, any batch size), by key.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        from wattwise.store.schema import remembered_limits_table

        return {row.memory_key: _remembered(row) for row in self._job_rows(remembered_limits_table, job)}

    def save_progress(
        self, key: str, state: dict[str, Any], *, profiled: int, limits: int, run_id: str | None = None
    ) -> None:
        """Keep an unfinished tuning's state under `key`, replacing any earlier one, for the next run to go on.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        from sqlalchemy.dialects import postgresql, sqlite

        from wattwise.store.schema import tuning_progress_table as table

        values: dict[str, Any] = {
            "memory_key": key,
            "state": json.dumps(state),
            "profiled": profiled,
            "limits": limits,
            "updated_at_s": time.time(),
            "run_id": run_id,
        }

        def work(conn: Connection) -> None:
            stmt = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table).values(**values)
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=[table.c.memory_key],
                    set_={name: stmt.excluded[name] for name in values if name != "memory_key"},
                )
            )

        with self._store() as store:
            store.write(work)

    def recall_progress(self, key: str) -> TuningProgress | None:
        """The unfinished tuning kept under `key`, or None.

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        from wattwise.store.schema import tuning_progress_table

        row = self._row(tuning_progress_table, key)
        return None if row is None else _progress(row)

    def progress(self, job: str) -> dict[str, TuningProgress]:
        """Every unfinished tuning kept for `job` (any GPU model and count, any batch size), by key."""
        from wattwise.store.schema import tuning_progress_table

        found = {row.memory_key: _progress(row) for row in self._job_rows(tuning_progress_table, job)}
        return {key: p for key, p in found.items() if p is not None}

    def forget_progress(self, key: str) -> bool:
        """Forget the unfinished tuning kept under `key`; False when there was none."""
        from sqlalchemy import delete

        from wattwise.store.schema import tuning_progress_table as table

        with self._store() as store:
            return store.write(lambda conn: bool(conn.execute(delete(table).where(table.c.memory_key == key)).rowcount))

    def forget(self, key: str) -> bool:
        """Forget what is remembered under `key`; False when nothing was."""
        from sqlalchemy import delete

        from wattwise.store.schema import remembered_limits_table as table

        with self._store() as store:
            return store.write(lambda conn: bool(conn.execute(delete(table).where(table.c.memory_key == key)).rowcount))


@dataclasses.dataclass(frozen=True)
class TuningProgress:
    """A tuning that could not profile every limit in its run: what it profiled, for the next run to go on from.

    Kept under the same key as a remembered limit (`memory_key`); a limit is remembered as chosen only from
    a finished profile.
    """

    #: The tuner's state where the run ended (`wattwise.power_limit.PowerLimitTuner.state_dict`).
    state: dict[str, Any]
    #: How many limits it had profiled, of how many.
    profiled: int
    limits: int
    #: When (unix seconds), and by which run.
    updated_at_s: float
    run_id: str | None = None


def _job_keys(job: str) -> str:
    """The LIKE pattern (escape character backslash) of every `memory_key` of `job`."""
    return job.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "|%"


def _progress(row: Any) -> TuningProgress | None:
    """A row of the tuning-progress table; None when its state is not a JSON object (a damaged row is no progress)."""
    try:
        state = json.loads(row.state)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(state, dict):
        return None
    return TuningProgress(state, int(row.profiled), int(row.limits), float(row.updated_at_s), row.run_id)


def _remembered(row: Any) -> RememberedLimit:
    """A row of the remembered-limits table as what it remembers."""
    return RememberedLimit(
        chosen=ProfileEntry(row.power_limit_w, row.time_s, row.energy_j),
        profile=[ProfileEntry(**entry) for entry in json.loads(row.profile)],
        selector=row.selector,
        eta=row.eta,
        chosen_at_s=row.chosen_at_s,
        run_id=row.run_id,
    )


def _upsert(conn: Connection, key: str, limit: RememberedLimit, *, only_if_later: bool) -> None:
    """Insert the row, or replace the one under `key` (only by a later choice when `only_if_later`)."""
    from sqlalchemy import or_
    from sqlalchemy.dialects import postgresql, sqlite

    from wattwise.store.schema import remembered_limits_table as table

    values: dict[str, Any] = {
        "memory_key": key,
        "power_limit_w": limit.chosen.power_limit_w,
        "time_s": limit.chosen.time_s,
        "energy_j": limit.chosen.energy_j,
        "profile": json.dumps([dataclasses.asdict(entry) for entry in limit.profile]),
        "selector": limit.selector,
        "eta": limit.eta,
        "chosen_at_s": limit.chosen_at_s,
        "run_id": limit.run_id,
    }
    stmt = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table).values(**values)
    later = or_(table.c.chosen_at_s.is_(None), table.c.chosen_at_s < stmt.excluded.chosen_at_s)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[table.c.memory_key],
            set_={name: stmt.excluded[name] for name in values if name != "memory_key"},
            where=later if only_if_later else None,
        )
    )


def _profile_entry(value: Any, field: str) -> ProfileEntry:
    """One {power_limit_w, time_s, energy_j} of 0.1.0's file, each within its bound.

    Raises:
        UsageError: naming `field` and what is wrong.
    """
    if not isinstance(value, dict) or set(value) != {"power_limit_w", "time_s", "energy_j"}:
        raise UsageError(f"{field} must be an object of power_limit_w, time_s and energy_j (got {value!r})")
    return ProfileEntry(
        POWER_LIMIT_W.check_number(value["power_limit_w"], f"{field}.power_limit_w"),
        TIME_S.check_number(value["time_s"], f"{field}.time_s"),
        ENERGY_J.check_number(value["energy_j"], f"{field}.energy_j"),
    )


def _short_text(value: Any, field: str, limit: int) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit or not value.isprintable():
        raise UsageError(f"{field} must be printable text of 1 to {limit} characters (got {value!r})")
    return value


def _legacy_entry(key: str, entry: Any) -> RememberedLimit:
    """One entry of 0.1.0's JSON file, checked field by field.

    Raises:
        UsageError: naming the key and the first field that is wrong.
    """
    _short_text(key, "key", MAX_KEY_CHARS)
    if not isinstance(entry, dict) or "chosen" not in entry:
        raise UsageError(f"{key}: not an object with a chosen limit")
    profile = entry.get("profile", [])
    if not isinstance(profile, list):
        raise UsageError(f"{key}: profile must be a list (got {profile!r})")
    selector, eta, saved_at = entry.get("selector"), entry.get("eta"), entry.get("saved_at")
    if selector is not None:
        _short_text(selector, f"{key}: selector", MAX_SELECTOR_CHARS)
    if eta is not None:
        if not is_number(eta):
            raise UsageError(f"{key}: eta must be a number between 0 and 1 (got {eta!r})")
        try:
            check_eta(eta)
        except UsageError as err:
            raise UsageError(f"{key}: {err}") from None
    return RememberedLimit(
        chosen=_profile_entry(entry["chosen"], f"{key}: chosen"),
        profile=[_profile_entry(e, f"{key}: profile[{i}]") for i, e in enumerate(profile)],
        selector=selector,
        eta=eta,
        chosen_at_s=None if saved_at is None else TIMESTAMP_S.check_number(saved_at, f"{key}: saved_at"),
    )


@contextmanager
def _legacy_lock(path: Path) -> Iterator[None]:
    """The exclusive lock wattwise 0.1.0 takes around every read and write of its file.

    Opened without truncation and never through a symlink (`open_lock`).
    """
    fd = open_lock(path.with_suffix(".lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def import_legacy_file(store: SqlJobStore, path: Path) -> int:
    """Import 0.1.0's JSON file of remembered limits into `store`, then rename it `*.imported`.

    An entry replaces the store's only when it was chosen later; the file is read and renamed under
    0.1.0's own lock. Only your own regular file is read (never through a link): another user's file is
    left as it is, one of yours that is not a regular file is set aside as `*.rejected`, with one warning
    either way. An entry with a field that is not a plausible tuning result is left in the renamed file,
    with one warning naming its key and the field.

    Args:
        store: The store to import into.
        path: 0.1.0's file (`power_limits.json` in the state directory).

    Returns:
        The number of entries imported (0 when there is no file).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    problem = trust_problem(st)
    if problem and st.st_uid != os.geteuid():
        _untrusted(path, problem)
        return 0
    kept = path.with_name(path.name + ".imported")
    with _legacy_lock(path):
        try:
            data: Any = read_trusted_json(path, max_bytes=MAX_LEGACY_BYTES)
        except FileNotFoundError:  # another process imported it while we waited for the lock
            return 0
        except UntrustedFile as err:
            _untrusted(path, str(err))
            return 0
        except ValueError as err:
            data, why = None, str(err)
        limits, bad = {}, []
        for key, entry in (data or {}).items():
            try:
                limits[key] = _legacy_entry(key, entry)
            except UsageError as err:
                bad.append(str(err))

        def work(conn: Connection) -> None:
            for key, limit in limits.items():
                _upsert(conn, key, limit, only_if_later=True)

        store.write(work)
        os.replace(path, kept)
    if data is None:
        plugin_warning(f"wattwise: {path} is {why}, not remembered power limits; it is left in {kept}")
    elif bad:
        shown = "; ".join(bad[:3]) + ("; ..." if len(bad) > 3 else "")
        plugin_warning(
            f"wattwise: {path} held {len(bad)} entries that are not remembered power limits ({shown}); "
            f"they are left in {kept}"
        )
    log.info(
        "imported %d remembered power limits from %s into %s (the file is now %s)",
        len(limits),
        path,
        store.describe(),
        kept,
    )
    return len(limits)


def _untrusted(path: Path, problem: str) -> None:
    """One warning for 0.1.0's file that cannot be trusted; set aside when it is yours (a link of yours).

    Another user's file is theirs: left as it is, and named again by the next process that finds it.
    """
    where = set_aside_if_mine(path)
    plugin_warning(
        f"wattwise: {path} {problem}; the power limits remembered in it were not imported (only your own "
        f"regular file is), and it is {where}",
        stacklevel=4,
    )
