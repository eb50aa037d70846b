"""One run of the history (`RunRow`), its checks, and its rows on a store's connection.

`wattwise.store.runs` is the public API over it (record, list, get, forget); this module imports nothing of
the store but its schema, so the store itself (`wattwise.store.sql`) delivers spooled runs with it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from wattwise.bounds import ENERGY_J, POWER_LIMIT_W, RUN_ENERGY_J, RUN_TIME_S, TIME_S, TIMESTAMP_S, Bound
from wattwise.errors import UsageError
from wattwise.names import check_job_name

if TYPE_CHECKING:
    from sqlalchemy import Connection


#: The power-limit modes a run has: it only measured, ran under a fixed cap, or tuned (or reused a tuned limit).
RUN_MODES = ("measure", "cap", "tune")
#: A run id: letters, digits, `.`, `_`, `-`, starting with a letter or digit (also the run's folder name).
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The longest folder path, status and framework name kept.
_MAX_FOLDER, _MAX_WORD = 4096, 32


class RunDict(TypedDict):
    """One run as `wattwise runs list --json` prints it (a contract: names and units stay).

    Times are ISO 8601 in UTC; energy in J, time in s, power in W; a figure that is unknown is null.
    """

    id: str
    job: str | None
    framework: str | None
    mode: str
    status: str | None
    start_time: str
    end_time: str
    devices: list[str]
    time_s: float
    energy_j: float
    energy_uncertainty_j: float | None
    power_limit_w: float | None
    saving_j: float | None
    time_cost_s: float | None
    folder: str
    simulated: bool


@dataclasses.dataclass(frozen=True)
class RunRow:
    """One training run as the history keeps it.

    Attributes:
        id: The run's id, also the name of its own folder (`new_run_id`).
        job: The job the run belongs to (`job=` or a recurring job), None when it named none.
        framework: Who drove it: "lightning", "accelerate", "cli" (None: not said).
        mode: "measure", "cap" or "tune" (`RUN_MODES`); a reused limit is "tune".
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
        return RunDict(
            id=self.id,
            job=self.job,
            framework=self.framework,
            mode=self.mode,
            status=self.status,
            start_time=self.start_time,
            end_time=self.end_time,
            devices=list(self.devices),
            time_s=self.time_s,
            energy_j=self.energy_j,
            energy_uncertainty_j=self.energy_uncertainty_j,
            power_limit_w=self.power_limit_w,
            saving_j=self.saving_j,
            time_cost_s=self.time_cost_s,
            folder=self.folder,
            simulated=self.simulated,
        )

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
        missing = [name for name in names if name not in data]
        if missing:
            raise UsageError(f"{where}: {missing[0]} is missing")
        devices = data["devices"]
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            raise UsageError(f"{where}: devices must be a list of device names (got {devices!r})")
        row = cls(**{**data, "devices": tuple(devices)})
        check_row(row, where=where)
        return row


def _seconds(text: str, field: str) -> float:
    from wattwise.carbon.series import parse_timestamp_s

    return parse_timestamp_s(text, where=field)


def iso_utc(t_s: float) -> str:
    """Seconds since the epoch as the history writes times: ISO 8601 in UTC."""
    return datetime.fromtimestamp(t_s, tz=timezone.utc).isoformat()


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
    elif isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) <= bound.high:
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
    if row.job is not None:
        check_job_name(row.job, setting=f"{where}: job")
    _optional_text(row.framework, f"{where}: framework", _MAX_WORD)
    _optional_text(row.status, f"{where}: status", _MAX_WORD)
    if row.mode not in RUN_MODES:
        raise UsageError(f"{where}: mode must be one of {', '.join(RUN_MODES)} (got {row.mode!r})")
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
    _optional_number(row.time_cost_s, TIME_S, f"{where}: time_cost_s", signed=True)
    _optional_text(row.folder, f"{where}: folder", _MAX_FOLDER)
    if not isinstance(row.simulated, bool):
        raise UsageError(f"{where}: simulated must be true or false (got {row.simulated!r})")


# -- on a connection (the store's `read`/`write` run these) ----------------------------------------------
def _values(row: RunRow) -> dict[str, Any]:
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
    }


def _row(db: Any) -> RunRow:
    return RunRow(
        id=db.id,
        job=db.job,
        framework=db.framework,
        mode=db.mode,
        status=db.status,
        start_time=iso_utc(db.start_s),
        end_time=iso_utc(db.end_s),
        devices=tuple(json.loads(db.devices)),
        time_s=db.time_s,
        energy_j=db.energy_j,
        energy_uncertainty_j=db.energy_uncertainty_j,
        power_limit_w=db.power_limit_w,
        saving_j=db.saving_j,
        time_cost_s=db.time_cost_s,
        folder=db.folder,
        simulated=bool(db.simulated),
    )


def put_run(conn: Connection, row: RunRow) -> None:
    """Insert the run's row, or replace the one with its id (a run recorded twice keeps one row)."""
    from sqlalchemy import delete, insert

    from wattwise.store.schema import run_history_table as table

    conn.execute(delete(table).where(table.c.id == row.id))
    conn.execute(insert(table).values(**_values(row)))


def select_runs(
    conn: Connection, *, job: str | None = None, since_s: float | None = None, status: str | None = None
) -> list[RunRow]:
    """The runs that match every filter given, oldest first (then by id)."""
    from sqlalchemy import select

    from wattwise.store.schema import run_history_table as table

    query = select(table)
    if job is not None:
        query = query.where(table.c.job == job)
    if since_s is not None:
        query = query.where(table.c.start_s >= since_s)
    if status is not None:
        query = query.where(table.c.status == status)
    return [_row(db) for db in conn.execute(query.order_by(table.c.start_s, table.c.id))]


def find_run(conn: Connection, run_id: str) -> RunRow:
    """The run with id `run_id`, else the only run whose id starts with it.

    Raises:
        UsageError: no run has that id, or several start with it (naming a few).
    """
    from sqlalchemy import select

    from wattwise.store.schema import run_history_table as table

    exact = conn.execute(select(table).where(table.c.id == run_id)).first()
    if exact is not None:
        return _row(exact)
    like = run_id.replace("_", r"\_") + "%"
    found = conn.execute(select(table).where(table.c.id.like(like, escape="\\")).order_by(table.c.id).limit(4)).all()
    if len(found) == 1:
        return _row(found[0])
    if not found:
        raise UsageError(f"no run {run_id!r} in the store (see `wattwise runs list`)")
    shown = ", ".join(db.id for db in found[:3])
    raise UsageError(
        f"run id {run_id!r} is ambiguous: it starts {shown}{', ...' if len(found) > 3 else ''}; give more of it"
    )
