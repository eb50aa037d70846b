"""The run record, `wattwise.run/1`: the three files a run leaves in its output directory, typed.

- `summary.json`: one `RunSummary`, the figures of the whole run, its settings and its decisions;
- `windows.csv`: one `WindowRow` per measurement window that ended, written as the run goes (`WindowsLog`);
- `power.csv`: one `PowerRow` per device per power sample.

This module is the only writer and the only reader of these files. Writing never follows a symlink
planted in the output directory: each file is created under a fresh temporary name beside its target
(O_CREAT|O_EXCL|O_NOFOLLOW) and moved into place with `os.replace`, which replaces a link instead of
following it. JSON never holds NaN or Infinity: a figure that is not finite is unknown, written as null.
Reading validates what the writer guarantees (types, finite numbers, non-negative energies and times,
required columns, whole rows, UTF-8 text, regular files) and turns a damaged file into a one-line
`UsageError` naming the file, the field and the fix. Keys and columns it does not know are ignored, so
the record may grow; keys that older or hand-made summaries lack are None (or empty) unless the report
cannot do without them (start and end time, energy).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wattwise import __version__
from wattwise.carbon.integrate import J_PER_KWH
from wattwise.carbon.series import parse_timestamp_s
from wattwise.codec import (
    AT_INDEX,
    FIX,
    FieldSpec,
    Flag,
    JsonObject,
    Number,
    NumberMap,
    Numbers,
    OpenObjects,
    Record,
    RecordMap,
    Records,
    Scalar,
    Text,
    Texts,
    Timestamp,
    UnixTime,
    Whole,
    Word,
    as_json,
    define_foreign,
    from_json,
    to_json_dict,
)
from wattwise.codec import iso_utc as iso_utc  # re-exported: the record's time format
from wattwise.errors import UsageError
from wattwise.profile import Payback, ProfileEntry
from wattwise.readable import duration
from wattwise.readable import resolution as resolution  # re-exported: used by the record's readers
from wattwise.readable import with_uncertainty as with_uncertainty
from wattwise.safe_files import finite_or_null
from wattwise.vocabulary import EndedHow, PhysicsName, RankNoteKind, RunMode, RunStatus, Selector

SCHEMA = "wattwise.run/1"
SCHEMA_PREFIX = "wattwise.run/"
SUMMARY_FILE = "summary.json"
WINDOWS_FILE = "windows.csv"
POWER_FILE = "power.csv"
#: What a process of the run whose figures came after the summary was written leaves beside it (a `RankNote`).
LATE_FILE = "late-rank{rank}.json"
POWER_COLUMNS = ("timestamp", "device", "power_w")
#: The columns of windows.csv; each device adds `<key>_energy_j` between `energy_j` and `approximate`.
WINDOW_COLUMNS = ("start_time", "window_name", "time_s", "energy_j", "approximate", "simulated")
#: Columns windows.csv gained later, after `WINDOW_COLUMNS`: a reader takes a file without them.
WINDOW_LATER_COLUMNS = ("energy_uncertainty_j", "kind")

#: A value in the settings timeline: a JSON scalar.
SettingValue = bool | int | float | str | None


#: How every output names the figures of a simulated GPU, by what drove it (`simulated_driven_by`, the values
#: of `wattwise.run.drive.DrivenBy`).
SIMULATED_LABELS = {
    "steps": "simulated, driven by your steps",
    "emulated": "simulated",
    "nothing": "simulated, idle power only (nothing drove the simulated GPU)",
}


def simulated_label(simulated: bool, driven_by: str | None) -> str | None:
    """How outputs mark a run's figures: None on hardware, else "simulated" and what drove it."""
    if not simulated:
        return None
    # A summary that does not say (an earlier version's) was driven by emulated work, or said so in its notes.
    return SIMULATED_LABELS.get(driven_by or "", SIMULATED_LABELS["emulated"])


def physics_of(summary: RunSummary) -> str | None:
    """The simulated GPUs' physics a run ran on ("ideal", "realistic"), as its devices recorded it.

    None on hardware, and for a summary whose devices do not say (one written before they did).
    """
    named = sorted({d["physics"] for d in summary.devices if isinstance(d.get("physics"), str)})
    return ", ".join(named) or None


def mixed_physics(runs: Sequence[tuple[bool, str | None]]) -> str | None:
    """What a comparison of runs on the ideal physics with others must say; None when they all ran alike.

    Args:
        runs: Each run's (simulated, physics), physics None where it is not known.
    """
    ideal = [simulated and physics == PhysicsName.IDEAL for simulated, physics in runs]
    if not any(ideal) or all(ideal):
        return None
    return (
        "Some of these runs ran on the simulated GPU's ideal physics (an exact energy counter, no noise) and "
        "others did not: their differences mix the physics with what changed between the runs, and an ideal "
        "run's uncertainty is none"
    )


def saving_resolved(saved_j: float, uncertainty_j: float | None) -> bool | None:
    """Whether a saving is resolved: larger than its uncertainty (an exact one, 0, always is); None: unknown."""
    if uncertainty_j is None:
        return None
    return uncertainty_j <= 0 or abs(saved_j) > uncertainty_j


# -- summary.json --------------------------------------------------------------------------------------
# Each field is defined once, with its JSON key and codec (`wattwise.codec`): `to_dict` and
# `parse_summary` follow from the definitions, in the fields' order (the order `summary.json` holds them).
class _JsonRecord:
    """A record whose JSON object follows from its `json_field`s."""

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object, keys in the order a reader expects them."""
        return to_json_dict(self)


define_foreign(
    ProfileEntry,
    power_limit_w=FieldSpec(Number(), required=True),
    time_s=FieldSpec(Number(), required=True),
    energy_j=FieldSpec(Number(), required=True),
)


define_foreign(
    Payback,
    energy_per_step_saved_j=FieldSpec(Number(minimum=None), required=True),
    energy_per_step_saved_uncertainty_j=FieldSpec(Number(), required=True),
    time_per_step_added_s=FieldSpec(Number(minimum=None), required=True),
    energy_saved_fraction=FieldSpec(Number(minimum=None), required=True),
    time_added_fraction=FieldSpec(Number(minimum=None), required=True),
    tuning_steps=FieldSpec(Whole(), required=True),
    tuning_energy_j=FieldSpec(Number(minimum=None), required=True),
    tuning_time_s=FieldSpec(Number(minimum=None), required=True),
    steps_at_chosen=FieldSpec(Whole(), required=True),
    run_energy_saved_j=FieldSpec(Number(minimum=None), required=True),
    run_energy_saved_uncertainty_j=FieldSpec(Number(), required=True),
    run_time_added_s=FieldSpec(Number(minimum=None), required=True),
    objective=FieldSpec(Text(), required=True),
    objective_per_step_saved=FieldSpec(Number(minimum=None), required=True),
    tuning_objective=FieldSpec(Number(minimum=None), required=True),
    run_objective_saved=FieldSpec(Number(minimum=None), required=True),
    break_even_steps=FieldSpec(Whole()),
)


def _said(name: str) -> Callable[[Any], bool]:
    """A field written only when it holds a value: fields added later, so a summary without them reads as before."""
    return lambda record: getattr(record, name) is not None


def _measured_again(record: Any) -> bool:
    return bool(getattr(record, "confirm_rounds", 0))


@dataclass(frozen=True)
class EpochEnergy(_JsonRecord):
    """Time and energy of one epoch (an epoch missing its number reads as its position in the list)."""

    epoch: int = field(metadata=as_json(Whole(), if_missing=AT_INDEX))
    time_s: float = field(metadata=as_json(Number(), required=True))
    energy_j: float = field(metadata=as_json(Number(), required=True))
    #: How precisely `energy_j` is known (J); None in summaries that do not say.
    energy_uncertainty_j: float | None = field(
        default=None, metadata=as_json(Number(), written=_said("energy_uncertainty_j"))
    )


@dataclass(frozen=True)
class SettingEvent(_JsonRecord):
    """A device setting applied during the run (e.g. `power_limit_w` = 175 on `rank0/gpu0`)."""

    timestamp_s: float = field(metadata=as_json(Number(minimum=None), key="timestamp", required=True))
    device: str = field(metadata=as_json(Text(), required=True))
    setting: str = field(metadata=as_json(Text(), required=True))
    value: SettingValue = field(metadata=as_json(Scalar()))


@dataclass(frozen=True)
class TuningSummary(_JsonRecord):
    """Whether power-limit tuning profiled every limit; when not, why, and what it measured."""

    finished: bool = field(metadata=as_json(Flag(), if_missing=False))
    #: The limits profiled, highest first.
    profiled: tuple[float, ...] = field(default=(), metadata=as_json(Numbers()))
    reason: str | None = field(default=None, metadata=as_json(Text()))
    #: Optimizer steps run at the chosen limit (the estimated saving counts these).
    steps_at_chosen: int | None = field(default=None, metadata=as_json(Whole()))
    #: Rounds of measuring again the limits the sweep left undecided (`power_limit.confirm_rounds`).
    #: Written only when there was one (a summary without them reads as before).
    confirm_rounds: int = field(default=0, metadata=as_json(Whole(), if_missing=0, written=_measured_again))
    #: The limits measured again in those rounds, highest first (each profile entry is then their mean).
    measured_again: tuple[float, ...] = field(default=(), metadata=as_json(Numbers(), written=_measured_again))
    #: The limits the sweep did not profile: it stopped once two limits in a row cost more than the best
    #: one by more than their uncertainty (written when it did).
    not_profiled: tuple[float, ...] = field(
        default=(), metadata=as_json(Numbers(), written=lambda record: bool(record.not_profiled))
    )


@dataclass(frozen=True)
class NonTrainingTime(_JsonRecord):
    """Time that was not training (one kind: validation, checkpoint, ...), excluded from step figures."""

    time_s: float = field(metadata=as_json(Number(), required=True))
    energy_j: float = field(metadata=as_json(Number(), required=True))
    count: int = field(metadata=as_json(Whole(), if_missing=0))
    #: How precisely `energy_j` is known (J); None in summaries that do not say.
    energy_uncertainty_j: float | None = field(
        default=None, metadata=as_json(Number(), written=_said("energy_uncertainty_j"))
    )

    @property
    def energy_resolved(self) -> bool:
        """Whether `energy_j` says anything: it exceeds its uncertainty (a pause shorter than the counter resolves: no).

        True in summaries that give no uncertainty.
        """
        return self.energy_uncertainty_j is None or self.energy_j > self.energy_uncertainty_j


def paused_energy(t: NonTrainingTime) -> str:
    """A pause's energy as printed: with its ±, or unresolved (no figure) when shorter than the counter resolves."""
    if t.energy_resolved:
        return with_uncertainty(t.energy_j, t.energy_uncertainty_j, "J")
    return "energy unresolved (shorter than the energy counter resolves)"


def _tuned(limit: PowerLimitSummary) -> bool:
    return limit.mode != RunMode.CAP


def _estimated(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.baseline_estimated


def _reused(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.reused


def _has_tuning(limit: PowerLimitSummary) -> bool:
    return _tuned(limit) and limit.tuning is not None


@dataclass(frozen=True, kw_only=True)
class PowerLimitSummary(_JsonRecord):
    """What the power-limit part did: a cap, or tuning (profile, choice, estimated saving).

    A cap records only its mode and limit.
    """

    #: "cap" or "tune".
    mode: str = field(metadata=as_json(Text(), required=True))
    selector: str | None = field(default=None, metadata=as_json(Text(), written=_tuned))
    eta: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    max_slowdown: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    #: The choice came from the limits memory of an earlier run, without profiling.
    reused: bool = field(default=False, metadata=as_json(Flag(), written=_tuned))
    chosen_power_limit_w: float | None = field(default=None, metadata=as_json(Number()))
    profile: tuple[ProfileEntry, ...] = field(default=(), metadata=as_json(Records(ProfileEntry), written=_tuned))
    #: Energy the run would have used at the highest limit, and the difference (None until chosen). A limit
    #: that used more energy than the highest one "saves" a negative amount.
    baseline_energy_j: float | None = field(default=None, metadata=as_json(Number(), written=_tuned))
    energy_saved_j: float | None = field(default=None, metadata=as_json(Number(minimum=None), written=_tuned))
    baseline_estimated: bool = field(default=False, metadata=as_json(Flag(), written=_estimated))
    #: A reused limit: the run that chose it and when (unix seconds); `selector` and `eta` are that run's.
    reused_run_id: str | None = field(default=None, metadata=as_json(Text(), key="reused_from.run_id", written=_reused))
    reused_chosen_at_s: float | None = field(
        default=None, metadata=as_json(UnixTime(), key="reused_from.chosen_at", written=_reused)
    )
    #: Whether tuning finished (None in summaries of earlier wattwise versions, which did not say).
    tuning: TuningSummary | None = field(default=None, metadata=as_json(Record(TuningSummary), written=_has_tuning))
    #: How precisely the saving and the baseline are known (J), from the profile windows' uncertainty; None
    #: when unknown (a reused limit, a resumed run, or a summary that does not say).
    energy_saved_uncertainty_j: float | None = field(
        default=None, metadata=as_json(Number(), written=_said("energy_saved_uncertainty_j"))
    )
    baseline_energy_uncertainty_j: float | None = field(
        default=None, metadata=as_json(Number(), written=_said("baseline_energy_uncertainty_j"))
    )
    #: False when the saving is no larger than its uncertainty: it is "not resolved", not a saving. None
    #: when unknown.
    saving_resolved: bool | None = field(default=None, metadata=as_json(Flag(), written=_said("saving_resolved")))
    #: What the chosen limit gains per step, what tuning cost, and this run's figure with its break-even, all
    #: against the same steps at the highest limit (`wattwise.profile.Payback`). `energy_saved_j` above is
    #: the steps at the chosen limit times the energy per step saved there: `payback` without tuning's cost.
    payback: Payback | None = field(default=None, metadata=as_json(Record(Payback), written=_said("payback")))


@dataclass(frozen=True)
class RunSettings(_JsonRecord):
    """The settings the run ended with."""

    power_limit_w: float | None = field(default=None, metadata=as_json(Number()))
    batch_size: int | None = field(default=None, metadata=as_json(Whole(minimum=1)))
    #: Path of the PLAN.json (`wattwise.frequency`) the run followed; None when it followed none.
    frequency_plan: str | None = field(default=None, metadata=as_json(Text()))


@dataclass(frozen=True)
class CarbonAwareSummary(_JsonRecord):
    """The carbon-aware power limit's inputs (present when the run switched limits by grid intensity)."""

    threshold_g_per_kwh: float = field(metadata=as_json(Number(), required=True))
    interval_s: float = field(metadata=as_json(Number(), required=True))
    intensity_source: str | None = field(default=None, metadata=as_json(Text()))


@dataclass(frozen=True)
class RankNote(_JsonRecord):
    """What the summary says of one process of a run, keyed by its kind and rank.

    The run's code decides from these, never from the notes' text; `rank_notes_text` renders them, every
    process of one kind in one note, into the summary's `notes`.
    """

    kind: RankNoteKind = field(metadata=as_json(Word(RankNoteKind), required=True))
    rank: int = field(metadata=as_json(Whole(), required=True))
    #: How it ended (`ENDED_APART`).
    how: EndedHow | None = field(default=None, metadata=as_json(Word(EndedHow)))
    #: The signal's or exception's name (`ENDED_APART`), why its file was refused (`UNREADABLE`), or the file
    #: that holds its figures (`LATE`).
    detail: str | None = field(default=None, metadata=as_json(Text()))
    #: How long the main process waited for its figures (s; `NO_FIGURES`).
    waited_s: float | None = field(default=None, metadata=as_json(Number()))
    #: The energy on its GPUs that the totals leave out (J; `LATE`).
    energy_j: float | None = field(default=None, metadata=as_json(Number()))


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(f"rank {r}" for r in ranks)


def _ended(how: EndedHow | None, detail: str | None, ranks: Sequence[int]) -> str:
    if how == EndedHow.SIGNALLED:
        return f"{detail} reached {_ranks(ranks)}"
    if how == EndedHow.RAISED:
        return f"{_ranks(ranks)} raised {detail}"
    return f"{_ranks(ranks)} ended"


def no_figures_note(ranks: Sequence[int], waited_s: float) -> str:
    """The note naming the processes that left no figures while the main process waited."""
    return (
        f"{_ranks(ranks)} left no figures within {waited_s:g} s of the main process's end (a "
        "process still waiting in a collective for this one leaves them only once that collective fails): "
        "their energy is missing; each process restores its own GPU settings as it ends"
    )


def rank_notes_text(notes: Sequence[RankNote]) -> tuple[str, ...]:
    """The summary's notes on its processes: how they ended apart, whose figures are missing or came late.

    A process whose figures came late is not also said to have left none.
    """
    of = {kind: sorted((n for n in notes if n.kind == kind), key=lambda n: n.rank) for kind in RankNoteKind}
    text: list[str] = []
    if of[RankNoteKind.ENDED_APART]:
        groups: dict[tuple[EndedHow | None, str | None], list[int]] = {}
        for n in of[RankNoteKind.ENDED_APART]:
            groups.setdefault((n.how, n.detail), []).append(n.rank)
        text.append(
            "; ".join(_ended(how, detail, ranks) for (how, detail), ranks in groups.items())
            + ": each restored its GPU settings and ended on its own; the figures are theirs up to then"
        )
    text.extend(f"rank {n.rank}: {n.detail}: its energy is missing" for n in of[RankNoteKind.UNREADABLE])
    late = {n.rank for n in of[RankNoteKind.LATE]}
    missing = [n for n in of[RankNoteKind.NO_FIGURES] if n.rank not in late]
    if missing:
        text.append(no_figures_note([n.rank for n in missing], missing[0].waited_s or 0.0))
    text.extend(
        f"rank {n.rank} left its figures after this summary was written ({n.detail}, beside it: "
        f"{n.energy_j or 0.0:.1f} J on its GPUs, not in these totals); it was waiting in a collective for "
        "the main process and could end only once that failed"
        for n in of[RankNoteKind.LATE]
    )
    return tuple(text)


def with_rank_notes(summary: RunSummary, notes: Sequence[RankNote]) -> RunSummary:
    """`summary` with `notes` as its notes on its processes, in place of the text of those it had."""
    old = set(rank_notes_text(summary.rank_notes))
    kept = tuple(n for n in summary.notes if n not in old)
    return dataclasses.replace(summary, rank_notes=tuple(notes), notes=(*kept, *rank_notes_text(notes)))


@dataclass(frozen=True, kw_only=True)
class RunSummary(_JsonRecord):
    """`summary.json`: the whole run, energy summed and time maxed over processes.

    Times are ISO 8601 with a timezone (`iso_utc`); `avg_power_w` is derived from energy and time and
    written after `cpu_energy_j`. Keys that older or hand-made summaries lack read as None (or empty),
    except those the report cannot do without (start and end time, energy).
    """

    schema: str = field(default=SCHEMA, metadata=as_json(Text()))
    #: None when read from a summary that does not say.
    wattwise_version: str | None = field(default=__version__, metadata=as_json(Text(), if_missing=None))
    #: "completed", "failed", "interrupted", ...
    status: str | None = field(default=None, metadata=as_json(Text()))
    #: When a summary does not say, whether its backend is "simulated".
    simulated: bool = field(default=False, metadata=as_json(Flag(), if_missing=None))
    backend: str | None = field(default=None, metadata=as_json(Text()))
    framework: str | None = field(default=None, metadata=as_json(Text()))
    job: str | None = field(default=None, metadata=as_json(Text()))
    hostname: str | None = field(default=None, metadata=as_json(Text()))
    world_size: int | None = field(default=None, metadata=as_json(Whole(minimum=1)))
    start_time: str = field(metadata=as_json(Timestamp(), required=True))
    end_time: str = field(metadata=as_json(Timestamp(), required=True))
    #: When a summary does not say, the time from start to end.
    time_s: float = field(metadata=as_json(Number()))
    energy_j: float = field(metadata=as_json(Number(), required=True))
    energy_per_device_j: Mapping[str, float] = field(default_factory=dict, metadata=as_json(NumberMap()))
    cpu_energy_j: float | None = field(default=None, metadata=as_json(Number()))
    steps: int | None = field(default=None, metadata=as_json(Whole()))
    epochs: tuple[EpochEnergy, ...] = field(default=(), metadata=as_json(Records(EpochEnergy)))
    #: Energy of the segments before a resume from a checkpoint (included in `energy_j`).
    resumed_energy_j: float = field(default=0.0, metadata=as_json(Number()))
    #: Each GPU as `Device.describe()` reports it, plus its `rank`: open-ended.
    devices: tuple[Mapping[str, Any], ...] = field(default=(), metadata=as_json(OpenObjects()))
    notes: tuple[str, ...] = field(default=(), metadata=as_json(Texts()))
    power_limit: PowerLimitSummary | None = field(default=None, metadata=as_json(Record(PowerLimitSummary)))
    settings: RunSettings = field(default_factory=RunSettings, metadata=as_json(Record(RunSettings)))
    settings_timeline: tuple[SettingEvent, ...] = field(default=(), metadata=as_json(Records(SettingEvent)))
    carbon_aware: CarbonAwareSummary | None = field(default=None, metadata=as_json(Record(CarbonAwareSummary)))
    #: Time that was not training (validation, checkpoints), by kind; included in `time_s`/`energy_j`.
    non_training: Mapping[str, NonTrainingTime] = field(
        default_factory=dict, metadata=as_json(RecordMap(NonTrainingTime))
    )
    #: How precisely `energy_j` is known (J): each GPU's counter resolution at the ends of the run (or its
    #: power polling), added in quadrature over GPUs and processes. None in summaries that do not say.
    energy_uncertainty_j: float | None = field(
        default=None, metadata=as_json(Number(), written=_said("energy_uncertainty_j"))
    )
    #: What drove a simulated GPU (`wattwise.run.drive.DrivenBy`): "steps" (the training steps themselves,
    #: `devices.simulated_drive`), "emulated" (`wattwise.tools.workload`, the demo) or "nothing" (its
    #: figures are its idle power only). None on hardware.
    simulated_driven_by: str | None = field(
        default=None, metadata=as_json(Text(), written=_said("simulated_driven_by"))
    )
    #: What `notes` says of the run's processes, as values (`RankNote`); written when there is one.
    rank_notes: tuple[RankNote, ...] = field(
        default=(), metadata=as_json(Records(RankNote), written=lambda record: bool(record.rank_notes))
    )
    #: The project the run belongs to (`wattwise.project`: the `project` setting, else the working
    #: directory's git root's or folder's name). None in summaries that do not say.
    project: str | None = field(default=None, metadata=as_json(Text(), written=_said("project")))

    @property
    def avg_power_w(self) -> float:
        """The run's average power (W): its energy over its time; 0 for a run that took no time."""
        return self.energy_j / self.time_s if self.time_s > 0 else 0.0

    @property
    def start_s(self) -> float:
        """`start_time` as unix seconds.

        Raises:
            UsageError: it is not an ISO 8601 time with a timezone (a summary built in code, never validated).
        """
        return parse_timestamp_s(self.start_time, where="start_time")

    @property
    def end_s(self) -> float:
        """`end_time` as unix seconds; a `UsageError` as for `start_s`."""
        return parse_timestamp_s(self.end_time, where="end_time")

    @property
    def device_names(self) -> tuple[str, ...]:
        """Model name of each device (`devices[].name`), when the run recorded it."""
        return tuple(d["name"] for d in self.devices if isinstance(d.get("name"), str) and d["name"])

    def json_derived(self) -> dict[str, tuple[str, Any]]:
        """`avg_power_w`, derived from energy and time, is written after `cpu_energy_j`."""
        return {"cpu_energy_j": ("avg_power_w", self.avg_power_w)}

    def to_json(self) -> str:
        """`summary.json`'s text: valid JSON, a figure that is not finite written as null."""
        return json.dumps(finite_or_null(self.to_dict()), indent=2, allow_nan=False) + "\n"


#: Why a tuned limit was never applied (`never_applied`).
NEVER_APPLIED = "the run ended as tuning finished, so no step ran at it (give the run more steps)"
#: Why, when a signal (SIGTERM, SIGINT) ended the run: more steps would not have helped.
NEVER_APPLIED_INTERRUPTED = "the run was interrupted as tuning finished, so no step ran at it"


def never_applied_why(status: str | None) -> str:
    """Why a tuned limit was never applied, by the run's status: advice to run longer only when it ended by itself."""
    return NEVER_APPLIED_INTERRUPTED if status == RunStatus.INTERRUPTED else NEVER_APPLIED


def never_applied(limit: PowerLimitSummary) -> bool:
    """Tuning finished and chose a limit in this run, but no optimizer step ran at it (`tuning.steps_at_chosen` 0).

    Tuning that did not finish says so, and why, instead (`tuning.reason`): one reason, said once.
    """
    return (
        limit.mode != RunMode.CAP
        and not limit.reused
        and limit.chosen_power_limit_w is not None
        and limit.tuning is not None
        and limit.tuning.finished
        and limit.tuning.steps_at_chosen == 0
    )


def with_saving_uncertainty(
    limit: PowerLimitSummary | None, relative_uncertainty: Mapping[float, float], run_energy_uncertainty_j: float
) -> PowerLimitSummary | None:
    """`limit` with how precisely its estimated saving (and baseline) are known, and whether the saving is resolved.

    The saving is the steps run at the chosen limit times the difference of two profile windows' energy per
    step (the highest limit's and the chosen one's); each window's uncertainty is its energy times
    `relative_uncertainty[limit]` (as measured in this run), the two in quadrature. Unknown (`limit` as it
    is) for a reused limit, or a window this run did not measure.
    """
    if limit is None or limit.energy_saved_j is None or limit.reused or limit.tuning is None or not limit.profile:
        return limit
    top = max(limit.profile, key=lambda e: e.power_limit_w)
    chosen = next((e for e in limit.profile if e.power_limit_w == limit.chosen_power_limit_w), None)
    if chosen is None or top.power_limit_w not in relative_uncertainty:
        return limit
    if chosen.power_limit_w not in relative_uncertainty:
        return limit
    steps = limit.tuning.steps_at_chosen or 0
    saved_u = 0.0
    if chosen is not top:
        saved_u = steps * math.hypot(
            relative_uncertainty[top.power_limit_w] * top.energy_j,
            relative_uncertainty[chosen.power_limit_w] * chosen.energy_j,
        )
    return dataclasses.replace(
        limit,
        energy_saved_uncertainty_j=saved_u,
        baseline_energy_uncertainty_j=math.hypot(saved_u, run_energy_uncertainty_j),
        saving_resolved=saving_resolved(limit.energy_saved_j, saved_u),
    )


def percent(value: float, uncertainty: float | None) -> str:
    """`14.4% ± 0.8%`, rounded to what the uncertainty resolves (at least one decimal); `14.4%` without one."""
    if not uncertainty or uncertainty <= 0 or not math.isfinite(uncertainty):
        return f"{value:.1f}%"
    places = max(1, resolution(uncertainty))
    return f"{value:.{places}f}% ± {uncertainty:.{places}f}%"


def limits_profiled(count: int) -> str:
    """`1 limit profiled`, `9 limits profiled`."""
    return f"{count} limit{'' if count == 1 else 's'} profiled"


def _more_or_less(value: float, unit_text: str, more: str = "more", less: str = "less") -> str:
    return f"{unit_text} {more if value >= 0 else less}"


def payback_lines(limit: PowerLimitSummary) -> tuple[str, str, str] | None:
    """The one saving of a tuned run, as every page gives it: three lines, in the order a user weighs them.

    At the chosen limit (energy and time per step against the highest limit: what a longer run gets);
    tuning's cost (what profiling took beyond running at the highest limit); this run (tuning included,
    against the same steps at the highest limit) with the break-even by the selector's objective. None
    when the summary has no `payback` (no limit chosen, an idle simulated GPU, an older summary).
    """
    pb = limit.payback
    if pb is None or limit.chosen_power_limit_w is None or not limit.profile:
        return None
    chosen_w = limit.chosen_power_limit_w
    top_j = max(limit.profile, key=lambda e: e.power_limit_w).energy_j
    share_u = 100 * pb.energy_per_step_saved_uncertainty_j / top_j if top_j > 0 else None
    share = percent(100 * abs(pb.energy_saved_fraction), share_u)
    per_step = with_uncertainty(abs(pb.energy_per_step_saved_j), pb.energy_per_step_saved_uncertainty_j, "J", places=3)
    at_chosen = (
        f"at the chosen {chosen_w:g} W: {_more_or_less(-pb.energy_saved_fraction, share)} energy per step "
        f"({per_step}) and {_more_or_less(pb.time_added_fraction, f'{100 * abs(pb.time_added_fraction):.1f}%')} "
        "time per step than at the highest limit"
        if chosen_w != max(e.power_limit_w for e in limit.profile)
        else f"at the chosen {chosen_w:g} W, the highest limit: the same energy and time per step"
    )
    tuning = (
        f"tuning's cost: {pb.tuning_steps} steps at other limits took "
        f"{_more_or_less(pb.tuning_energy_j, f'{abs(pb.tuning_energy_j):.1f} J')} energy and "
        f"{_more_or_less(pb.tuning_time_s, duration(abs(pb.tuning_time_s)))} time than at the highest limit"
    )
    saved = with_uncertainty(abs(pb.run_energy_saved_j), pb.run_energy_saved_uncertainty_j, "J")
    by = f"by {pb.objective}" + (
        f", eta {limit.eta:g}" if pb.objective == Selector.COST and limit.eta is not None else ""
    )
    if pb.break_even_steps is None:
        when = f"tuning never pays back: {chosen_w:g} W is no better than the highest limit ({by})"
    elif pb.break_even_steps == 0:
        when = f"tuning paid back at once: its steps at other limits already cost less than at the highest ({by})"
    elif pb.paid_back:
        when = f"tuning paid back after {pb.break_even_steps} steps at {chosen_w:g} W ({by})"
    else:
        when = (
            f"the run ended before tuning paid back: {pb.steps_at_chosen} of the {pb.break_even_steps} steps "
            f"at {chosen_w:g} W it needs ({by})"
        )
    this_run = (
        f"this run: {saved} {'saved' if pb.run_energy_saved_j >= 0 else 'more'} and "
        f"{_more_or_less(pb.run_time_added_s, duration(abs(pb.run_time_added_s)))} time than its steps at the "
        f"highest limit, tuning included; {when}"
    )
    return at_chosen, tuning, this_run


def format_summary(summary: RunSummary, *, output_dir: str | os.PathLike[str] | None = None) -> str:
    """The few lines printed at the end of a run: energy, time, power, and what the power-limit choice did."""
    label = simulated_label(summary.simulated, summary.simulated_driven_by)
    tag = f" ({label.replace('simulated', 'SIMULATED GPU', 1)}: modelled figures, not measurements)" if label else ""
    energy_j = summary.energy_j
    energy = with_uncertainty(energy_j, summary.energy_uncertainty_j, "J")
    lines = [
        f"wattwise{tag}: {summary.framework or ''} run {summary.status or ''}",
        f"  time {summary.time_s:.2f} s, energy {energy} ({energy_j / J_PER_KWH:.6f} kWh), "
        f"average power {summary.avg_power_w:.1f} W over {len(summary.energy_per_device_j)} GPU(s), "
        f"{summary.steps} steps",
    ]
    pl = summary.power_limit
    if pl is not None and pl.chosen_power_limit_w is not None:
        if pl.mode == RunMode.CAP:
            lines.append(f"  power cap {pl.chosen_power_limit_w:g} W")
        else:
            if pl.reused:
                how = f"reused from run {pl.reused_run_id}" if pl.reused_run_id else "reused from a previous run"
            else:
                how = limits_profiled(len(pl.profile))
            eta = f"{pl.eta:g}" if pl.eta is not None else "unset"
            lines.append(f"  power limit {pl.chosen_power_limit_w:g} W chosen by {pl.selector} (eta {eta}; {how})")
            if never_applied(pl):
                lines.append(f"  the chosen limit was never applied: {never_applied_why(summary.status)}")
            elif payback_lines(pl) is not None:
                lines.extend(f"  {line}" for line in payback_lines(pl) or ())
            elif pl.energy_saved_j is not None:
                saved = with_uncertainty(pl.energy_saved_j, pl.energy_saved_uncertainty_j, "J")
                if pl.saving_resolved is False:
                    lines.append(
                        f"  saving against the maximum limit not resolved: {saved}, within its measurement uncertainty"
                    )
                else:
                    lines.append(f"  estimated saving against the maximum limit: {saved}")
    if pl is not None and pl.tuning is not None and not pl.tuning.finished:
        what = "did not finish" if pl.chosen_power_limit_w is not None or pl.mode == RunMode.CAP else "chose no limit"
        lines.append(f"  tuning {what}: {pl.tuning.reason}")
    for kind, t in summary.non_training.items():
        lines.append(f"  {kind}: {t.time_s:.2f} s, {paused_energy(t)} ({t.count}x; not in step figures)")
    if output_dir:
        lines.append(f"  summary: {output_dir}/{SUMMARY_FILE}")
    return "\n".join(lines)


def parse_summary(raw: Any, *, where: str) -> RunSummary:
    """Validate a summary's JSON object; `where` (the file) starts every error message.

    Each field is validated as its definition says (see `RunSummary`); then what spans fields: the schema,
    the end not before the start, and the values a summary may leave out that follow from others.

    Raises:
        UsageError: The object is not a wattwise run summary or a field is damaged (one line naming the
            file, the field and the fix).
    """
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: must hold a JSON object (a wattwise run summary); {FIX}")
    f = JsonObject(raw, where)
    schema = f.opt_text("schema")
    if schema is not None and not schema.startswith(SCHEMA_PREFIX):
        raise UsageError(
            f"{where}: schema {schema!r} is not a wattwise run summary ({SCHEMA_PREFIX}N); "
            "pass the summary.json of a wattwise run"
        )
    f.opt_number("avg_power_w")  # derived from energy and time; checked, not kept
    summary = from_json(RunSummary, f)
    start_s, end_s = summary.start_s, summary.end_s
    if end_s < start_s:
        raise UsageError(f"{where}: end_time {summary.end_time!r} is before start_time {summary.start_time!r}; {FIX}")
    return dataclasses.replace(
        summary,
        simulated=summary.simulated if summary.simulated is not None else summary.backend == "simulated",
        time_s=summary.time_s if summary.time_s is not None else end_s - start_s,
    )
