"""Per-stage instruction profiles: time and energy of one microbatch at each SM frequency.

File format (the Perseus artifact's and Zeus's): a CSV with the header `stage,instruction,frequency,time,energy`
and one row per (stage, instruction, frequency): stage index from 0, `forward` or `backward`, the SM
frequency in MHz, the time in seconds and the energy in joules of one microbatch. Other columns are
ignored, except an optional `clock_change_s`: how long a change of that stage's GPU clock takes to act
(seconds, the same on every row of a stage; `wattwise.frequency.profiler` measures it and writes the
column), which the planner respects (`wattwise.pipeline.segments`). Loading validates every row and the
whole: each error names the line and the fix.
`wattwise.frequency.profiler` measures such a profile on GPUs.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from wattwise.errors import UsageError
from wattwise.pipeline.schedule import INSTRUCTIONS, Instruction
from wattwise.safe_files import replace_file

COLUMNS: tuple[str, ...] = ("stage", "instruction", "frequency", "time", "energy")
#: The header line a profile file must have (its messages name it).
_HEADER = ",".join(COLUMNS)
#: The optional column of a stage's clock-change latency (seconds).
CLOCK_CHANGE_COLUMN = "clock_change_s"
#: A clock change that takes longer than this is not a latency but a mistake in the file (seconds).
MAX_CLOCK_CHANGE_S = 10.0


@dataclass(frozen=True)
class FrequencyOption:
    """One option of a (stage, instruction): an SM frequency and the time and energy of one microbatch at it."""

    frequency_mhz: int
    time_s: float
    energy_j: float

    @property
    def power_w(self) -> float:
        """Average power while the instruction runs."""
        return self.energy_j / self.time_s


@dataclass(frozen=True)
class PipelineProfile:
    """The measured options of every (stage, instruction), each sorted from the highest frequency down.

    Construction validates the whole profile: stages 0..S-1 with no gap, both instructions for every
    stage, at least two frequencies each, and positive, finite times and energies.
    """

    measurements: Mapping[tuple[int, Instruction], tuple[FrequencyOption, ...]]
    source: str = field(default="<memory>", compare=False)
    #: Per stage, how long a change of its GPU's SM clock takes to act (s); a stage not in it: not measured.
    clock_change_s: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.measurements:
            raise UsageError(f"{self.source}: the profile has no rows; profile at least two frequencies per stage")
        stages = sorted({stage for stage, _ in self.measurements})
        for expected, stage in enumerate(stages):
            if stage != expected:
                raise UsageError(
                    f"{self.source}: stage {expected} is missing (stages found: {stages}); profile every stage from 0"
                )
        ordered: dict[tuple[int, Instruction], tuple[FrequencyOption, ...]] = {}
        for stage in stages:
            for instruction in INSTRUCTIONS:
                options = self.measurements.get((stage, instruction))
                if not options:
                    raise UsageError(
                        f"{self.source}: stage {stage} has no {instruction} rows; "
                        f"profile {instruction} at every frequency"
                    )
                for option in options:
                    _check_option(option, f"{self.source}: stage {stage} {instruction}")
                freqs = [o.frequency_mhz for o in options]
                if len(set(freqs)) != len(freqs):
                    raise UsageError(
                        f"{self.source}: stage {stage} {instruction} lists a frequency twice; "
                        "keep one row per frequency"
                    )
                if len(freqs) < 2:
                    raise UsageError(
                        f"{self.source}: stage {stage} {instruction} has a single frequency "
                        f"({freqs[0]} MHz); profile at least two frequencies to plan"
                    )
                ordered[(stage, instruction)] = tuple(sorted(options, key=lambda o: -o.frequency_mhz))
        unknown = set(self.measurements) - set(ordered)
        if unknown:
            raise UsageError(f"{self.source}: unknown instruction in {sorted(unknown)}; use forward or backward")
        object.__setattr__(self, "measurements", ordered)
        for stage, latency_s in self.clock_change_s.items():
            if stage not in stages:
                raise UsageError(f"{self.source}: clock_change_s names stage {stage}, which the profile lacks")
            if not (math.isfinite(latency_s) and 0 <= latency_s <= MAX_CLOCK_CHANGE_S):
                raise UsageError(
                    f"{self.source}: stage {stage} clock_change_s must be between 0 and {MAX_CLOCK_CHANGE_S:g} "
                    f"seconds (got {latency_s!r})"
                )
        object.__setattr__(self, "clock_change_s", dict(sorted(self.clock_change_s.items())))

    @property
    def num_stages(self) -> int:
        """Number of pipeline stages in the profile."""
        return 1 + max(stage for stage, _ in self.measurements)

    def options(self, stage: int, instruction: Instruction) -> tuple[FrequencyOption, ...]:
        """The options of one stage's instruction, highest frequency first."""
        return self.measurements[(stage, instruction)]

    def clock_change_of(self, stage: int) -> float:
        """How long a clock change takes to act on `stage`'s GPU, in seconds (0 when not measured)."""
        return float(self.clock_change_s.get(stage, 0.0))

    def at_max_frequency(self, stage: int, instruction: Instruction) -> FrequencyOption:
        """The option at the highest profiled frequency (the default GPU behaviour)."""
        return self.measurements[(stage, instruction)][0]

    def rows(self) -> Iterator[tuple[int, Instruction, int, float, float]]:
        """`(stage, instruction, frequency_mhz, time_s, energy_j)` rows, in file order."""
        for (stage, instruction), options in self.measurements.items():
            for o in options:
                yield stage, instruction, o.frequency_mhz, o.time_s, o.energy_j


def _check_option(m: FrequencyOption, where: str) -> None:
    if not (isinstance(m.frequency_mhz, int) and m.frequency_mhz > 0):
        raise UsageError(f"{where}: frequency must be a positive integer in MHz (got {m.frequency_mhz!r})")
    for name, value, unit in (("time", m.time_s, "seconds"), ("energy", m.energy_j, "joules")):
        if not math.isfinite(value):
            raise UsageError(f"{where} at {m.frequency_mhz} MHz: {name} is {value}; re-measure it ({unit})")
        if value <= 0:
            raise UsageError(f"{where} at {m.frequency_mhz} MHz: {name} must be positive in {unit} (got {value})")


def parse_profile(rows: Iterable[Mapping[str, str | None]], source: str = "<memory>") -> PipelineProfile:
    """Validate CSV rows (dicts keyed by column name) into a profile. Line numbers count the header as 1."""
    grouped: dict[tuple[int, Instruction], list[FrequencyOption]] = {}
    seen: dict[tuple[int, str, int], int] = {}
    latencies: dict[int, float] = {}
    for line, row in enumerate(rows, start=2):
        where = f"{source}, line {line}"
        stage = _parse_int(row.get("stage"), "stage", where, minimum=0)
        instruction = (row.get("instruction") or "").strip().lower()
        if instruction not in INSTRUCTIONS:
            shown = row.get("instruction") or "(empty)"
            raise UsageError(f"{where}: instruction must be forward or backward (got {shown!r})")
        frequency = _parse_int(row.get("frequency"), "frequency", where, minimum=1)
        time_s = _parse_positive(row.get("time"), "time", where, "seconds", maximum=MAX_INSTRUCTION_TIME_S)
        energy_j = _parse_positive(row.get("energy"), "energy", where, "joules", maximum=MAX_INSTRUCTION_ENERGY_J)
        key = (stage, instruction, frequency)
        if key in seen:
            raise UsageError(
                f"{where}: stage {stage} {instruction} at {frequency} MHz repeats line {seen[key]}; "
                "keep one row per frequency"
            )
        seen[key] = line
        grouped.setdefault((stage, instruction), []).append(FrequencyOption(frequency, time_s, energy_j))
        latency = (row.get(CLOCK_CHANGE_COLUMN) or "").strip()
        if latency:
            value = _parse_latency(latency, where)
            if latencies.setdefault(stage, value) != value:
                raise UsageError(
                    f"{where}: stage {stage} clock_change_s {latency} differs from its earlier rows' "
                    f"{latencies[stage]!r}; give one value per stage"
                )
    return PipelineProfile({k: tuple(v) for k, v in grouped.items()}, source=source, clock_change_s=latencies)


def _parse_latency(raw: str, where: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{where}: clock_change_s must be a number of seconds (got {raw!r})") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_CLOCK_CHANGE_S):
        raise UsageError(f"{where}: clock_change_s must be between 0 and {MAX_CLOCK_CHANGE_S:g} seconds (got {raw})")
    return value


def load_profile(path: str | Path) -> PipelineProfile:
    """Read and validate a `stage,instruction,frequency,time,energy` CSV file."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                raise UsageError(f"{path}: missing column(s) {', '.join(missing)}; the header must be {_HEADER}")
            reader.fieldnames = header
            return parse_profile(reader, source=str(path))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such profile file; pass the path of a {_HEADER} CSV") from None
    except OSError as err:
        raise UsageError(
            f"{path}: cannot read the profile ({err.strerror or err}); pass the path of a {_HEADER} CSV"
        ) from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise UsageError(f"{path}: not a readable CSV file ({err})") from None


def write_profile(profile: PipelineProfile, path: str | Path) -> None:
    """Write `profile` in the same CSV format `load_profile` reads (a link at `path` is replaced).

    The `clock_change_s` column is written when the profile knows a stage's latency.
    """
    latencies = profile.clock_change_s

    def write(fh: TextIO) -> None:
        writer = csv.writer(fh)
        writer.writerow([*COLUMNS, CLOCK_CHANGE_COLUMN] if latencies else COLUMNS)
        for stage, instruction, frequency, time_s, energy_j in profile.rows():
            row: list[object] = [stage, instruction, frequency, repr(float(time_s)), repr(float(energy_j))]
            if latencies:
                row.append(repr(float(latencies[stage])) if stage in latencies else "")
            writer.writerow(row)

    replace_file(path, write)


def _parse_int(text: str | None, name: str, where: str, *, minimum: int) -> int:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{where}: {name} must be an integer (got {raw or '(empty)'!r})") from None
    if not math.isfinite(value) or value != int(value) or value < minimum:
        raise UsageError(f"{where}: {name} must be an integer >= {minimum} (got {raw!r})")
    return int(value)


#: One microbatch's forward or backward on one GPU: an hour, or a megajoule, is far beyond any real one.
MAX_INSTRUCTION_TIME_S = 3600.0
MAX_INSTRUCTION_ENERGY_J = 1e6


def _parse_positive(text: str | None, name: str, where: str, unit: str, *, maximum: float) -> float:
    raw = (text or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{where}: {name} must be a number in {unit} (got {raw or '(empty)'!r})") from None
    if math.isnan(value) or math.isinf(value):
        raise UsageError(f"{where}: {name} is {raw}; re-measure it or drop the row")
    if value <= 0:
        raise UsageError(f"{where}: {name} must be positive in {unit} (got {raw})")
    if value > maximum:
        raise UsageError(
            f"{where}: {name} {raw} {unit} is beyond any real instruction (at most {maximum:g}); "
            "check the column's unit"
        )
    return value
