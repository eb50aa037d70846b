"""One run of the history (`RunRow`), its checks, and its rows on a store's connection.

`wattwise.store.runs` is the public API over it (record, list, get, forget); this module imports nothing of
the store but its schema, so the store itself (`wattwise.store.sql`) delivers spooled runs with it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from wattwise.bounds import ENERGY_J, POWER_LIMIT_W, RUN_ENERGY_J, RUN_TIME_S, TIME_S, TIMESTAMP_S, Bound
from wattwise.codec import is_number, is_whole, iso_utc
from wattwise.copying import typed_dict_of
from wattwise.errors import UsageError
from wattwise.names import check_job_name
from wattwise.project import MAX_PROJECT_CHARS
from wattwise.vocabulary import RunMode

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The power-limit modes a run has: it only measured, ran under a fixed cap, or tuned (or reused a tuned limit).
#: A run id: letters, digits, `.`, `_`, `-`, starting with a letter or digit (also the run's folder name).
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The longest folder path, status and framework name kept.
_MAX_FOLDER, _MAX_WORD = 4096, 32
#: The longest owner kept (a login or a database role name).
_MAX_OWNER = 128
#: The fields a run's JSON object may lack (added since the spool's first format): their default then.
_OPTIONAL = frozenset({"owner", "saving_uncertainty_j", "project", "payback"})
#: The most devices a run's row lists (a node's GPUs times its nodes, with room to spare).
_MAX_DEVICES = 65536
#: The most steps a break-even counts (a week of 1 ms steps, with room to spare).
_MAX_STEPS = 10**12


class PaybackDict(TypedDict):
    """A run's one saving as `wattwise runs list --json` gives it under `payback` (names of summary.json's payback)."""

    #: Energy this run saved against the same steps at the highest limit, tuning included (J; negative: it cost).
    run_energy_saved_j: float
    #: How precisely that is known (J, one standard uncertainty).
    run_energy_saved_uncertainty_j: float
    #: Time this run added against the same steps at the highest limit, tuning included (s; positive: slower).
    run_time_added_s: float
    #: Steps at the chosen limit after which tuning pays back by the selector's objective; null: it never does.
    break_even_steps: int | None
    #: Whether the run ran long enough at the chosen limit for tuning to pay back.
    paid_back: bool


@dataclasses.dataclass(frozen=True)
class RunPayback:
    """A tuned run's one saving, as the history keeps it: `summary.json`'s `power_limit.payback` for the run.

    The figure `wattwise runs show`, a run's page, the report and the statement give as "this run" (the
    figures per step at the chosen limit and tuning's cost stay in the run's summary.json).
    """

    run_energy_saved_j: float
    run_energy_saved_uncertainty_j: float
    run_time_added_s: float
    break_even_steps: int | None
    paid_back: bool

    def to_dict(self) -> PaybackDict:
        """The payback's JSON object (`PaybackDict`)."""
        return typed_dict_of(PaybackDict, self)

    @classmethod
    def from_dict(cls, data: object, *, where: str = "run") -> RunPayback:
        """A payback from its JSON object, checked field by field (a `UsageError` naming `where` and the field)."""
        if not isinstance(data, Mapping):
            raise UsageError(f"{where}: payback must be an object of the run's saving (got {data!r})")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise UsageError(f"{where}: payback.{unknown[0]} is not a field of a run's payback")
        missing = [name for name in names if name not in data]
        if missing:
            raise UsageError(f"{where}: payback.{missing[0]} is missing")
        payback = cls(**data)
        payback.check(where=where)
        return payback

    def check(self, *, where: str = "run") -> None:
        """Refuse a payback no run has (a `UsageError` naming `where`, the field and its range)."""
        _optional_number(self.run_energy_saved_j, ENERGY_J, f"{where}: payback.run_energy_saved_j", signed=True)
        RUN_ENERGY_J.check_number(
            self.run_energy_saved_uncertainty_j, f"{where}: payback.run_energy_saved_uncertainty_j"
        )
        _optional_number(self.run_time_added_s, TIME_S, f"{where}: payback.run_time_added_s", signed=True)
        steps = self.break_even_steps
        if steps is not None and (not is_whole(steps) or not 0 <= steps <= _MAX_STEPS):
            raise UsageError(
                f"{where}: payback.break_even_steps must be null or a whole number of steps (got {steps!r})"
            )
        if not isinstance(self.paid_back, bool):
            raise UsageError(f"{where}: payback.paid_back must be true or false (got {self.paid_back!r})")


#: One run as `wattwise runs list --json` prints it (a contract: names and units stay): `RunRow`'s fields in
#: their order, `devices` a list and `payback` its object (`PaybackDict`). Times are ISO 8601 in UTC; energy
#: in J, time in s, power in W; a figure that is unknown is null.
RunDict = dict[str, object]


class UnreadableDict(TypedDict):
    """A row of the history that is not a run's, as `wattwise runs list --json` lists it under `unreadable`."""

    id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class UnreadableRun:
    """A row of the history that does not read as a run (a crash mid-write, an older wattwise, a hand edit).

    It costs that row alone: the readers list it by id, with why, and `wattwise runs forget ID` removes it.

    Attributes:
        id: The row's id, as stored (non-printable characters shown escaped).
        reason: The first field that is wrong and why, in one line.
        folder: The row's folder when that column is text, else None.
    """

    id: str
    reason: str
    folder: str | None = None

    def to_dict(self) -> UnreadableDict:
        """The row's JSON object: its id and why it is unreadable."""
        return UnreadableDict(id=self.id, reason=self.reason)

    def line(self) -> str:
        """One line for a reader: the id, why, and how to remove it."""
        return f"run {self.id} is unreadable ({self.reason}); `wattwise runs forget {self.id}` removes its row"


@dataclasses.dataclass(frozen=True)
class RunListing:
    """What a reader of the history gets: the runs that read, and the rows that do not (`UnreadableRun`)."""

    runs: list[RunRow]
    unreadable: list[UnreadableRun]


@dataclasses.dataclass(frozen=True)
class RunRow:
    """One training run as the history keeps it.

    Attributes:
        id: The run's id, also the name of its own folder (`new_run_id`).
        job: The job the run belongs to (`job=` or a recurring job), None when it named none.
        framework: Who drove it: "lightning", "accelerate", "cli" (None: not said).
        mode: "measure", "cap" or "tune" (`RunMode`); a reused limit is "tune".
        status: How it ended: "completed", "failed", "interrupted", ...
        start_time: When it started, ISO 8601 in UTC.
        end_time: When it ended, ISO 8601 in UTC.
        devices: Its GPUs' model names, one per GPU, in rank order ("(simulated)" when they were).
        time_s: Its wall-clock time.
        energy_j: Its measured energy (every process and device together).
        energy_uncertainty_j: The energy's uncertainty (J, one standard uncertainty); None: not known.
        power_limit_w: The limit tuning chose (or reused), or the cap; None when it set none.
        saving_j: Energy saved against the highest limit (negative: it cost energy); None: no saving claimed.
        time_cost_s: Time that saving cost (positive: the run was slower); None when not known.
        folder: The run's own folder (absolute), holding its summary.json, power.csv and windows.csv.
        simulated: Whether its figures come from the simulated GPU rather than a measurement.
        owner: Who recorded it (`current_owner`), set by the store when the row is written; only they, or
            the store's admin, forget or replace it. None: not yet written, or recorded before rows had one.
        saving_uncertainty_j: How precisely `saving_j` is known (J); None: unknown.
        project: The project it belongs to (`wattwise.project`); None: not said.
        payback: Its one saving, tuning included (`RunPayback`), as summary.json's `power_limit.payback`
            gives it; None: no saving claimed, or recorded before rows kept it (`saving_j` then stands,
            the saving at the chosen limit over the steps run there, tuning's cost left out).
    """

    id: str
    job: str | None
    framework: str | None
    mode: str
    status: str | None
    start_time: str
    end_time: str
    devices: tuple[str, ...]
    time_s: float
    energy_j: float
    energy_uncertainty_j: float | None
    power_limit_w: float | None
    saving_j: float | None
    time_cost_s: float | None
    folder: str
    simulated: bool
    owner: str | None = None
    saving_uncertainty_j: float | None = None
    project: str | None = None
    payback: RunPayback | None = None

    @property
    def run_saving_j(self) -> float | None:
        """The saving the readers show: the payback's (this run, tuning included), else the row's `saving_j`."""
        return self.payback.run_energy_saved_j if self.payback is not None else self.saving_j

    @property
    def run_time_cost_s(self) -> float | None:
        """The time cost the readers show: the payback's time added, else the row's `time_cost_s`."""
        return self.payback.run_time_added_s if self.payback is not None else self.time_cost_s

    @property
    def start_s(self) -> float:
        """`start_time` in seconds since the epoch."""
        return _seconds(self.start_time, "start_time")

    @property
    def end_s(self) -> float:
        """`end_time` in seconds since the epoch."""
        return _seconds(self.end_time, "end_time")

    @property
    def avg_power_w(self) -> float:
        """Average power (W): energy over time; 0 for a run that took no time."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    def to_dict(self) -> RunDict:
        """The run's JSON object (`RunDict`): the `wattwise runs list --json` contract."""
        values: RunDict = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["devices"] = list(self.devices)
        values["payback"] = self.payback.to_dict() if self.payback is not None else None
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "run") -> RunRow:
        """A run from its JSON object (`to_dict`'s, as the spool keeps it), checked field by field.

        Raises:
            UsageError: a field missing or unknown, of the wrong type or outside its bound; the message
                names `where` and the field.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise UsageError(f"{where}: {unknown[0]} is not a field of a run")
        missing = [name for name in names if name not in data and name not in _OPTIONAL]
        if missing:
            raise UsageError(f"{where}: {missing[0]} is missing")
        devices = data["devices"]
        if not isinstance(devices, list | tuple) or not all(isinstance(d, str) for d in devices):
            raise UsageError(f"{where}: devices must be a list of device names (got {devices!r})")
        given = data.get("payback")
        payback = RunPayback.from_dict(given, where=where) if given is not None else None
        row = cls(**{**data, "devices": tuple(devices), "payback": payback})
        check_row(row, where=where)
        return row


def _seconds(text: str, field: str) -> float:
    from wattwise.carbon.series import parse_timestamp_s

    return parse_timestamp_s(text, where=field)


def new_run_id(start_s: float) -> str:
    """A new run's id: its start in UTC to the second and 6 random hex digits (`20261202T021500Z-3f9a1c`).

    Ids sort by start; the random part keeps two runs started in the same second (on one machine or several
    sharing a store) apart.
    """
    stamp = datetime.fromtimestamp(start_s, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def check_run_id(text: object, *, setting: str = "ID") -> str:
    """`text` when it can be a run id (or a prefix of one), else a `UsageError` naming `setting`."""
    if isinstance(text, str) and _RUN_ID.fullmatch(text):
        return text
    raise UsageError(
        f"{setting}: {text!r} is not a run id; give an id as `wattwise runs list` shows it "
        "(e.g. 20261202T021500Z-3f9a1c)"
    )


def _optional_number(value: object, bound: Bound, field: str, *, signed: bool = False) -> None:
    """None, or a number within `bound` (`signed`: its size within the bound, either sign)."""
    if value is None:
        return
    if not signed:
        bound.check_number(value, field)
    elif not is_number(value) or not abs(value) <= bound.high:
        raise UsageError(f"{field} must be a number from {-bound.high:g} to {bound.high:g} (got {value!r})")


def _optional_text(value: object, field: str, limit: int) -> None:
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= limit or not value.isprintable()):
        raise UsageError(f"{field} must be printable text of 1 to {limit} characters (got {value!r})")


def check_row(row: RunRow, *, where: str = "run") -> None:
    """Refuse a row no run has: what the store accepts, from a run or from a spool file.

    Raises:
        UsageError: naming `where`, the first field that is wrong, its range and its value.
    """
    check_run_id(row.id, setting=f"{where}: id")
    if not isinstance(row.devices, tuple) or len(row.devices) > _MAX_DEVICES:
        raise UsageError(f"{where}: devices must be a list of at most {_MAX_DEVICES} device names")
    for name in row.devices:
        _optional_text(name, f"{where}: devices", _MAX_FOLDER)
    if row.job is not None:
        check_job_name(row.job, setting=f"{where}: job")
    _optional_text(row.framework, f"{where}: framework", _MAX_WORD)
    _optional_text(row.status, f"{where}: status", _MAX_WORD)
    if row.mode not in tuple(RunMode):
        raise UsageError(f"{where}: mode must be one of {', '.join(RunMode)} (got {row.mode!r})")
    for name in ("start_time", "end_time"):
        value = getattr(row, name)
        if not isinstance(value, str):
            raise UsageError(f"{where}: {name} must be an ISO 8601 time (got {value!r})")
        TIMESTAMP_S.check(_seconds(value, f"{where}: {name}"), f"{where}: {name}")
    RUN_TIME_S.check_number(row.time_s, f"{where}: time_s")
    RUN_ENERGY_J.check_number(row.energy_j, f"{where}: energy_j")
    _optional_number(row.energy_uncertainty_j, RUN_ENERGY_J, f"{where}: energy_uncertainty_j")
    _optional_number(row.power_limit_w, POWER_LIMIT_W, f"{where}: power_limit_w")
    _optional_number(row.saving_j, ENERGY_J, f"{where}: saving_j", signed=True)
    _optional_number(row.saving_uncertainty_j, RUN_ENERGY_J, f"{where}: saving_uncertainty_j")
    _optional_number(row.time_cost_s, TIME_S, f"{where}: time_cost_s", signed=True)
    _optional_text(row.folder, f"{where}: folder", _MAX_FOLDER)
    _optional_text(row.owner, f"{where}: owner", _MAX_OWNER)
    _optional_text(row.project, f"{where}: project", MAX_PROJECT_CHARS)
    if row.payback is not None:
        if not isinstance(row.payback, RunPayback):
            raise UsageError(f"{where}: payback must be a run's payback (got {row.payback!r})")
        row.payback.check(where=where)
    if not isinstance(row.simulated, bool):
        raise UsageError(f"{where}: simulated must be true or false (got {row.simulated!r})")


# -- on a connection (the store's `read`/`write` run these) ----------------------------------------------
def _values(row: RunRow) -> dict[str, object]:
    return {
        "id": row.id,
        "job": row.job,
        "framework": row.framework,
        "mode": row.mode,
        "status": row.status,
        "start_s": row.start_s,
        "end_s": row.end_s,
        "devices": json.dumps(list(row.devices)),
        "time_s": row.time_s,
        "energy_j": row.energy_j,
        "energy_uncertainty_j": row.energy_uncertainty_j,
        "power_limit_w": row.power_limit_w,
        "saving_j": row.saving_j,
        "time_cost_s": row.time_cost_s,
        "folder": row.folder,
        "simulated": row.simulated,
        "owner": row.owner,
        "saving_uncertainty_j": row.saving_uncertainty_j,
        "project": row.project,
        **_payback_values(row.payback),
    }


#: The history's columns of a run's payback, each `payback_` and the payback's field.
PAYBACK_COLUMNS = tuple(f"payback_{f.name}" for f in dataclasses.fields(RunPayback))


def _payback_values(payback: RunPayback | None) -> dict[str, object]:
    """The payback's columns (all NULL for none)."""
    if payback is None:
        return dict.fromkeys(PAYBACK_COLUMNS)
    return {f"payback_{name}": value for name, value in payback.to_dict().items()}


def _stored_payback(db: Any) -> dict[str, object] | None:
    """A row's payback columns as its JSON object (`RunPayback.from_dict` checks it); None when it has none.

    A store before revision 0008 has no such columns; a boolean comes back from SQLite as 0 or 1.
    """
    values = {name.removeprefix("payback_"): getattr(db, name, None) for name in PAYBACK_COLUMNS}
    if all(value is None for value in values.values()):
        return None
    if values["paid_back"] in (0, 1):  # also False and True
        values["paid_back"] = bool(values["paid_back"])
    return values


def _shown_id(value: object) -> str:
    """A stored id as a message shows it: printable, at most 64 characters (escaped otherwise)."""
    text = value if isinstance(value, str) else repr(value)
    return text[:64].encode("unicode_escape").decode("ascii")


def _row(db: Any) -> RunRow | UnreadableRun:
    """The run in a row of the history, read as the spool's runs are (`RunRow.from_dict`), or why it is not one.

    The columns come back as the database holds them (`_raw_columns`), so a value of the wrong type in any
    column (SQLite keeps what it is given) makes that row unreadable, never the query that read it.
    """
    run_id = _shown_id(db.id)
    folder = db.folder if isinstance(db.folder, str) else None
    try:
        try:
            devices = json.loads(db.devices) if isinstance(db.devices, str | bytes) else db.devices
        except ValueError as err:
            raise UsageError(f"devices is not JSON ({err})") from None
        if db.simulated not in (0, 1):  # also False and True
            raise UsageError(f"simulated must be true or false (got {db.simulated!r})")
        times = {}
        for name, column in (("start_time", db.start_s), ("end_time", db.end_s)):
            if isinstance(column, bool) or not isinstance(column, int | float):
                raise UsageError(f"{name} must be a time in seconds (got {column!r})")
            TIMESTAMP_S.check(float(column), name)
            times[name] = iso_utc(column)
        data = {name: getattr(db, name) for name in _STORED_AS_IS}
        data["owner"] = getattr(db, "owner", None)  # a store at revision 0003 has no owner column
        data["saving_uncertainty_j"] = getattr(db, "saving_uncertainty_j", None)  # none before revision 0005
        data["project"] = getattr(db, "project", None)  # none before revision 0006
        data["payback"] = _stored_payback(db)  # none before revision 0008
        row = RunRow.from_dict(
            {**data, **times, "devices": devices, "simulated": bool(db.simulated)}, where=f"run {run_id}"
        )
    except (UsageError, ValueError, TypeError, OverflowError, OSError) as err:
        reason = " ".join(str(err).split())
        prefix = f"run {run_id}: "
        return UnreadableRun(run_id, reason.removeprefix(prefix)[:300], folder)
    return row


#: The run's fields that are one column each, stored as they are.
_STORED_AS_IS = (
    "id",
    "job",
    "framework",
    "mode",
    "status",
    "time_s",
    "energy_j",
    "energy_uncertainty_j",
    "power_limit_w",
    "saving_j",
    "time_cost_s",
    "folder",
)


def _raw_columns(conn: Connection) -> list[Any]:
    """The history table's columns the store has, read without SQLAlchemy's conversions (`_row` checks each).

    A store at an older revision a reader may read (`wattwise.store.migrations.READABLE_REVISION`) lacks the
    columns added since; they read as unknown.
    """
    from sqlalchemy import inspect, type_coerce
    from sqlalchemy.types import NullType

    from wattwise.store.schema import run_history_table as table

    present = {column["name"] for column in inspect(conn).get_columns(table.name)}
    return [type_coerce(c, NullType()).label(c.name) for c in table.c if c.name in present]


def current_owner(conn: Connection) -> str:
    """Who writes on `conn`: the database user on a server (its own authentication says), else this login."""
    from sqlalchemy import text

    if conn.dialect.name == "postgresql":
        return str(conn.execute(text("SELECT current_user")).scalar_one())
    return login_name()


def login_name() -> str:
    """This process's user as a SQLite store names a row's owner: the login of its effective uid."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid with no name (a container)
        return f"uid {os.geteuid()}"


def is_store_admin(conn: Connection) -> bool:
    """Whether the user on `conn` administers the store.

    On a server: owns the history's table, or is a superuser. On SQLite: owns the store's file, or is root.
    """
    from sqlalchemy import text

    if conn.dialect.name == "postgresql":
        query = text(
            "SELECT r.rolsuper OR t.tableowner = current_user FROM pg_roles r, pg_tables t "
            "WHERE r.rolname = current_user AND t.tablename = 'wattwise_run_history'"
        )
        return bool(conn.execute(query).scalar())
    database = conn.engine.url.database or ""
    if os.geteuid() == 0 or database in ("", ":memory:"):
        return True
    try:
        return os.stat(database).st_uid == os.geteuid()
    except OSError:
        return False


def check_owner(conn: Connection, run_id: str, owner: str | None, *, doing: str) -> None:
    """Refuse `doing` to the run `run_id` whose row belongs to `owner`, unless that is you or you administer the store.

    A row with no owner (recorded before rows had one) is anyone's.

    Raises:
        UsageError: naming the run, its owner and who may.
    """
    if owner is None or owner == current_owner(conn) or is_store_admin(conn):
        return
    raise UsageError(
        f"run {run_id} belongs to {owner}: only they, or the store's admin (who owns the store), may {doing} it"
    )


def put_run(conn: Connection, row: RunRow) -> None:
    """Insert the run's row, or replace the one with its id (a run recorded twice keeps one row).

    The row carries who wrote it (`current_owner`, whatever it says itself); replacing another user's row
    is refused (`check_owner`).

    Raises:
        UsageError: the run's row belongs to another user.
    """
    from sqlalchemy import delete, insert, select

    from wattwise.store.schema import run_history_table as table

    me = current_owner(conn)
    before = conn.execute(select(table.c.owner).where(table.c.id == row.id)).first()
    if before is not None:
        check_owner(conn, row.id, before.owner, doing="replace")
    conn.execute(delete(table).where(table.c.id == row.id))
    conn.execute(insert(table).values(**_values(dataclasses.replace(row, owner=me))))


def select_history(
    conn: Connection,
    *,
    job: str | None = None,
    since_s: float | None = None,
    status: str | None = None,
    project: str | None = None,
) -> RunListing:
    """The runs that match every filter given, oldest first (then by id), and the rows that are not runs."""
    from sqlalchemy import select

    from wattwise.store.schema import run_history_table as table

    query = select(*_raw_columns(conn))
    if job is not None:
        query = query.where(table.c.job == job)
    if since_s is not None:
        query = query.where(table.c.start_s >= since_s)
    if status is not None:
        query = query.where(table.c.status == status)
    if project is not None:
        query = query.where(table.c.project == project)
    runs: list[RunRow] = []
    unreadable: list[UnreadableRun] = []
    for db in conn.execute(query.order_by(table.c.start_s, table.c.id)):
        row = _row(db)
        if isinstance(row, RunRow):
            runs.append(row)
        else:
            unreadable.append(row)
    return RunListing(runs, unreadable)


def select_runs(
    conn: Connection, *, job: str | None = None, since_s: float | None = None, status: str | None = None
) -> list[RunRow]:
    """The runs that match every filter given, oldest first (then by id); rows that are not runs are left out."""
    return select_history(conn, job=job, since_s=since_s, status=status).runs


def find_row(conn: Connection, run_id: str) -> RunRow | UnreadableRun:
    """The row with id `run_id`, else the only row whose id starts with it, read or unreadable.

    Raises:
        UsageError: no row has that id, or several start with it (naming a few).
    """
    from sqlalchemy import select

    from wattwise.store.schema import run_history_table as table

    exact = conn.execute(select(*_raw_columns(conn)).where(table.c.id == run_id)).first()
    if exact is not None:
        return _row(exact)
    like = run_id.replace("\\", "\\\\").replace("_", r"\_").replace("%", r"\%") + "%"
    query = select(*_raw_columns(conn)).where(table.c.id.like(like, escape="\\")).order_by(table.c.id).limit(4)
    found = conn.execute(query).all()
    if len(found) == 1:
        return _row(found[0])
    if not found:
        raise UsageError(f"no run {run_id!r} in the store (see `wattwise runs list`)")
    shown = ", ".join(_shown_id(db.id) for db in found[:3])
    raise UsageError(
        f"run id {run_id!r} is ambiguous: it starts {shown}{', ...' if len(found) > 3 else ''}; give more of it"
    )


def find_run(conn: Connection, run_id: str) -> RunRow:
    """The run with id `run_id`, else the only run whose id starts with it.

    Raises:
        UsageError: no run has that id, several start with it (naming a few), or its row is unreadable
            (saying how to remove it).
    """
    row = find_row(conn, run_id)
    if isinstance(row, UnreadableRun):
        raise UsageError(row.line())
    return row
