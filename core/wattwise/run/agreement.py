"""How the processes of one run agree on what they do, and what each hands over when the run ends.

Processes of one run must issue the same collectives, so a decision that changes what a process does
(degrade to measurement only, skip tuning, measure nothing) is taken by every process together, here:

- `agree`: at a decision point every process says whether it failed and why (`None`: it did not); one
  collective, and every process learns the same `Agreement` (which ranks failed, and why), as Lightning's
  `reduce_boolean_decision` agrees a decision and this adds its reason.
- `combine_telling`: figures combined over processes (time maxed, energy summed) in the one all-reduce a
  logging or decision point makes anyway, with one more slot that counts the processes that lost their
  measurement since the last exchange; only when it is not zero do the processes `agree` on who and why.
- `RankEnd`: what each process hands over at the end of the run: its figures, its settings timeline, the
  limits someone else lifted on its GPUs, and, when the processes end apart, how it ended. Exchanged in one
  collective by `Run.finish`; left in a file by a process that ends apart (`leave_rank_end`) and read back
  by the main one (`collect_rank_ends`) with the trust and validation of every file wattwise reads back.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

from wattwise.codec import JsonObject, is_number
from wattwise.devices.base import DeviceDescription
from wattwise.distributed import Collective
from wattwise.safe_files import UntrustedFile, read_trusted_json, replace_file
from wattwise.vocabulary import EndedHow

__all__ = [
    "FIGURES_LEFT",
    "SIGNALLED_WAIT_S",
    "Agreement",
    "Ended",
    "Failure",
    "LeftBehind",
    "RankEnd",
    "agree",
    "agree_opening",
    "agree_tuning",
    "collect_rank_ends",
    "combine_telling",
    "leave_rank_end",
    "parse_rank_end",
]

#: Where a process of several that ends apart leaves its `RankEnd` in the output folder.
FIGURES_LEFT = "interrupted-rank{rank}.json"
#: How long the main process of several that end apart waits for the others' `RankEnd` files.
SIGNALLED_WAIT_S = 3.0
#: A `RankEnd` file is a few kilobytes, its power samples included; anything far larger is not one.
MAX_RANK_END_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Failure:
    """One process that failed at a decision point, and why (one line)."""

    rank: int
    reason: str


@dataclass(frozen=True)
class Agreement:
    """What every process learnt at one decision point: the processes that failed, in rank order."""

    failures: tuple[Failure, ...] = ()
    #: How many processes agreed.
    processes: int = 1
    #: Whether a GPU of any process is simulated (`agree_opening`; False elsewhere): every process's logged
    #: figures are then marked simulated, so that they log the same metrics (one collective each in Lightning).
    simulated: bool = False
    #: The slowest energy counter's period among every process's GPUs (`agree_tuning`; 0 elsewhere), in s:
    #: every process tunes by it, so that windows end on the same steps everywhere.
    counter_period_s: float = 0.0

    @property
    def failed(self) -> bool:
        """Whether any process failed (then every process acts on it together)."""
        return bool(self.failures)

    @property
    def ranks(self) -> list[int]:
        """The ranks that failed."""
        return [f.rank for f in self.failures]

    @property
    def everyone(self) -> bool:
        """Whether every process failed."""
        return len(self.failures) == self.processes

    @classmethod
    def of(cls, reasons: Sequence[str | None]) -> Agreement:
        """The agreement of processes whose reasons (None: did not fail) are `reasons`, in rank order."""
        return cls(tuple(Failure(rank, str(why)) for rank, why in enumerate(reasons) if why is not None), len(reasons))

    def with_simulated(self, simulated: bool) -> Agreement:
        """This agreement, saying whether any process's GPU is simulated."""
        return dataclasses.replace(self, simulated=simulated)

    def note(self, *, leaving_out: Sequence[int] = ()) -> str:
        """`rank R: why` for each process that failed, but those `leaving_out` (already said); "" for none."""
        return "; ".join(f"rank {f.rank}: {f.reason}" for f in self.failures if f.rank not in leaving_out)


def agree(collective: Collective, reason: str | None) -> Agreement:
    """A decision point: every process says why it failed (None: it did not); all learn the same, in one collective.

    Called by every process of the run at the same point. A single process needs no collective.

    Args:
        collective: The run's processes.
        reason: Why this process failed, in one line; None when it did not.

    Returns:
        The processes that failed, and why, the same on every process.
    """
    if collective.world_size == 1:
        reasons: list[Any] = [reason]
    else:
        reasons = collective.all_gather(reason)
    return Agreement.of(reasons)


def agree_opening(collective: Collective, reason: str | None, *, simulated: bool) -> Agreement:
    """`agree` where the measurement opens, also learning whether any process's GPU is simulated (same collective).

    The combined figures of a run whose processes mix a simulated GPU with none (a process that found nothing
    to measure) are simulated figures on every process, and every process must log the same metrics.
    """
    if collective.world_size == 1:
        return Agreement.of([reason]).with_simulated(simulated)
    gathered = collective.all_gather((reason, simulated))
    return Agreement.of([why for why, _ in gathered]).with_simulated(any(sim for _, sim in gathered))


def agree_tuning(collective: Collective, reason: str | None, *, counter_period_s: float) -> Agreement:
    """`agree` at the start of a run that changes settings, also learning the slowest energy counter's period.

    In the same collective every process says why it cannot change its GPU (None: it can) and how often its
    GPUs' energy counters change; each then tunes by the slowest (`PowerLimitControl.agree_counter_period`).
    """
    if collective.world_size == 1:
        return dataclasses.replace(Agreement.of([reason]), counter_period_s=counter_period_s)
    gathered = collective.all_gather((reason, float(counter_period_s)))
    return dataclasses.replace(
        Agreement.of([why for why, _ in gathered]), counter_period_s=max(float(p) for _, p in gathered)
    )


def combine_telling(
    collective: Collective, figures: Sequence[tuple[float, float]], lost: str | None
) -> tuple[list[tuple[float, float]], Agreement]:
    """Figures combined over processes, and which processes lost their measurement since the last exchange.

    One all-reduce holds the figures (time maxed, energy summed) and a count of the processes that lost their
    measurement (`lost` not None here); only when that count is not zero do the processes `agree` on who and
    why (a second collective, once per loss). A process that lost its measurement sends its time and no
    energy.

    Args:
        collective: The run's processes.
        figures: This process's `(time_s, energy_j)` of each window.
        lost: Why this process lost its measurement since the last exchange; None when it did not.

    Returns:
        The combined `(time_s, energy_j)` of each window, and the processes that lost their measurement.
    """
    if collective.world_size == 1:
        return list(collective.combine(figures)), Agreement(processes=1)
    combined = collective.combine([*figures, (0.0, 0.0 if lost is None else 1.0)])
    *windows, (_, losses) = combined
    if losses < 0.5:  # a count of processes, summed as a float
        return windows, Agreement(processes=collective.world_size)
    return windows, agree(collective, lost)


class Ended(TypedDict):
    """How one process ended when the processes ended apart (`RankEnd.ended`)."""

    #: A `wattwise.vocabulary.EndedHow` word.
    how: str
    #: The signal's name (`SIGTERM`) or the exception's type, when it had one.
    detail: str | None


class RankedDevice(DeviceDescription):
    """A GPU as `Device.describe()` reports it, and the process (`rank`) that measured it."""

    rank: int


class RankFigures(TypedDict):
    """One process's figures of the run (`RunMeasurement.rank_figures`), as its end record holds them."""

    #: Joules by device label (`rank0/gpu0`); empty when the process lost its measurement.
    energy: dict[str, float]
    #: Its CPU packages' joules, None without one.
    cpu: float | None
    time_s: float
    #: Each GPU as `Device.describe()` reports it, plus its `rank`.
    devices: list[RankedDevice]
    #: Its paused figures by kind: `[time_s, energy_j, count]`, then the energy's squared uncertainty (J^2).
    paused: dict[str, list[float]]
    #: Power samples: `[unix time, {device label: watts}]`.
    samples: list[tuple[float, dict[str, float]]]
    #: Why it lost its measurement since the last exchange, None when it did not.
    lost: str | None


class _RankEndRequired(RankFigures):
    """The fields every process's end record has (`RankEnd` adds the optional ones)."""

    rank: int
    #: Its settings timeline: `[timestamp_s, device, setting, value]`.
    timeline: list[list[Any]]
    #: The limits someone else lifted on its GPUs, one note each.
    lifted: list[str]
    #: How it ended, when the processes ended apart; else None.
    ended: Ended | None


class RankEnd(_RankEndRequired, total=False):
    """What one process hands over at the end of the run (JSON-serialisable; see the module docstring).

    The two uncertainty fields are optional (a process of an older release leaves them out), spelled
    through `total=False` because `typing.NotRequired` needs Python 3.11.
    """

    #: How precisely each GPU's energy is known (J, by device label; absent: 0).
    uncertainty: dict[str, float]
    #: How precisely its CPU packages' energy is known (J; None without one).
    cpu_uncertainty: float | None


def _joules(f: JsonObject, key: str) -> dict[str, float]:
    """Joules (or watts) by device label: finite numbers, of either sign; empty when absent."""
    value = f.raw.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and is_number(v) for k, v in value.items()):
        f.refuse_as(key, "must map device labels to finite numbers")
    return {k: float(v) for k, v in value.items()}


def _rows(f: JsonObject, key: str, fits: Callable[[Sequence[Any]], bool], words: str) -> list[Sequence[Any]]:
    """The list at `key` of positional rows (JSON lists) that each `fits`, refused in `words`; empty when absent."""
    value = f.raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(row, list | tuple) and fits(row) for row in value):
        f.refuse_as(key, words)
    return value


def _ended(f: JsonObject) -> Ended | None:
    ended = f.raw.get("ended")
    if ended is None:
        return None
    if not isinstance(ended, Mapping) or ended.get("how") not in tuple(EndedHow):
        f.refuse_as("ended", f"must be null or {{how: one of {', '.join(EndedHow)}, detail}}")
    return Ended(how=EndedHow(ended["how"]), detail=JsonObject(ended, "", "ended.", fix="").opt_text("detail"))


def parse_rank_end(raw: Any, *, rank: int) -> RankEnd:
    """A `RankEnd` read back from a file, every field checked; the file must be rank `rank`'s.

    Read by the codec (`wattwise.codec.JsonObject`) with neither the file nor a fix in its messages: the
    caller names the file (`collect_rank_ends`). The positional rows (`paused`, `samples`, `timeline`) are
    refused in the words of their format.

    Raises:
        ValueError: A field is missing or of the wrong type, or the record is another rank's (names it).
    """
    if not isinstance(raw, Mapping):
        raise ValueError("must hold a JSON object")
    f = JsonObject(raw, "", fix="")
    if f.opt_int("rank") != rank:
        f.refuse("rank", str(rank), raw.get("rank"))
    paused = f.raw.get("paused", {})
    if not isinstance(paused, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list | tuple) and len(v) in (3, 4) and all(map(is_number, v))
        for k, v in paused.items()
    ):
        f.refuse_as("paused", "must map kinds to [time_s, energy_j, count] (and the squared uncertainty)")
    samples = _rows(
        f, "samples", lambda s: len(s) == 2 and is_number(s[0]), "must be a list of [unix time, {device: watts}]"
    )
    devices = f.objects("devices")
    timeline = _rows(
        f,
        "timeline",
        lambda e: (
            len(e) == 4
            and is_number(e[0])
            and isinstance(e[1], str)
            and isinstance(e[2], str)
            and (e[3] is None or isinstance(e[3], bool | int | float | str))
        ),
        "must be a list of [timestamp_s, device, setting, value]",
    )
    lifted = f.strings("lifted")
    time_s = f.number("time_s", minimum=None)
    return RankEnd(
        energy=_joules(f, "energy"),
        cpu=f.opt_number("cpu", minimum=None),
        time_s=time_s,
        uncertainty=_joules(f, "uncertainty"),
        cpu_uncertainty=f.opt_number("cpu_uncertainty", minimum=None),
        # Each as that process's `Device.describe()` wrote it: open-ended, read with `.get`.
        devices=[cast(RankedDevice, dict(d.raw)) for d in devices],
        paused={k: [float(x) for x in v] for k, v in paused.items()},
        samples=[(float(s[0]), _joules(JsonObject({"samples": s[1]}, "", fix=""), "samples")) for s in samples],
        lost=f.opt_text("lost"),
        rank=rank,
        timeline=[list(e) for e in timeline],
        lifted=list(lifted),
        ended=_ended(f),
    )


def leave_rank_end(out: Path, record: RankEnd) -> None:
    """A process that ends apart leaves its `RankEnd` in the output folder, for the main one to read."""
    replace_file(out / FIGURES_LEFT.format(rank=record["rank"]), lambda fh: json.dump(record, fh))


@dataclass(frozen=True)
class LeftBehind:
    """What the other processes of a run that ended apart left for the main one (`collect_rank_ends`)."""

    #: The records found, by rank.
    found: dict[int, RankEnd]
    #: Why a file found could not be read, by rank (its figures are left out).
    refused: dict[int, str]
    #: How long the main process waited for them.
    waited_s: float


def collect_rank_ends(out: Path, size: int, *, wait_s: float | None = None) -> LeftBehind:
    """The `RankEnd`s the other processes left in `out` within `wait_s`, by rank; each file read is removed.

    A file that cannot be trusted (a link, another user's) or does not hold a valid record counts as no
    record, and says why.

    Args:
        out: The run's output folder.
        size: How many processes the run has.
        wait_s: How long to wait for them (None: `SIGNALLED_WAIT_S`).
    """
    wait_s = SIGNALLED_WAIT_S if wait_s is None else wait_s
    found: dict[int, RankEnd] = {}
    refused: dict[int, str] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for other in range(1, size):
            path = out / FIGURES_LEFT.format(rank=other)
            if other in found or other in refused:
                continue
            try:
                raw = read_trusted_json(path, max_bytes=MAX_RANK_END_BYTES)
                found[other] = parse_rank_end(raw, rank=other)
            except FileNotFoundError:  # not yet (it is written whole, under another name, then moved here)
                continue
            except UntrustedFile as err:  # left where it is: it is not this run's to remove
                refused[other] = f"its {path.name} {err}"
                continue
            except ValueError as err:
                refused[other] = f"its {path.name} is not one wattwise wrote ({err})"
            path.unlink(missing_ok=True)
        if len(found) + len(refused) == size - 1 or time.monotonic() >= deadline:
            return LeftBehind(found, refused, wait_s)
        time.sleep(0.05)
