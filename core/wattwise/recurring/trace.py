"""Zeus's training and power traces (NSDI'23 format), loaded and checked.

- `summary_train.csv`: `dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch`,
  one row per (training run, target metric): the epoch at which the target was reached (`nan`: never).
- `summary_power_<gpu>.csv`: `dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power`,
  seconds per epoch and average watts at each (batch size, power limit).

A workload's batch sizes are those present in both files (Zeus's inner join).
"""

from __future__ import annotations

import csv
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from wattwise.bounds import POWER_W, TIME_S
from wattwise.errors import UsageError

TRAIN_COLUMNS = ("dataset", "network", "batch_size", "optimizer", "run", "target_metric", "target_epoch")
POWER_COLUMNS = ("dataset", "network", "batch_size", "optimizer", "power_limit", "time_per_epoch", "average_power")


@dataclass(frozen=True)
class PowerPoint:
    """One (batch size, power limit) of the power trace: seconds and average watts per epoch."""

    power_limit_w: float
    time_per_epoch_s: float
    average_power_w: float

    @property
    def energy_per_epoch_j(self) -> float:
        """Energy of one epoch at this point: seconds per epoch times average power."""
        return self.time_per_epoch_s * self.average_power_w


@dataclass(frozen=True)
class WorkloadTrace:
    """One workload at one target metric: traced runs and power points per batch size."""

    dataset: str
    network: str
    optimizer: str
    target_metric: float
    #: Per batch size, the epoch at which each traced run reached the target (nan: never).
    target_epochs: dict[int, tuple[float, ...]]
    #: Per batch size, the power points from the lowest to the highest power limit.
    power: dict[int, tuple[PowerPoint, ...]]
    #: The GPU's highest power limit in the power trace (all workloads): MaxPower of the cost.
    max_power_w: float

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The batch sizes the power trace has, ascending."""
        return tuple(sorted(self.target_epochs))

    @property
    def power_limits_w(self) -> tuple[float, ...]:
        """The power limits the power trace has, ascending."""
        return tuple(sorted({p.power_limit_w for points in self.power.values() for p in points}))

    def point(self, batch_size: int, power_limit_w: float) -> PowerPoint:
        """The traced time per epoch and average power at one batch size and power limit.

        Raises:
            KeyError: the trace has no such point.
        """
        for p in self.power[batch_size]:
            if p.power_limit_w == power_limit_w:
                return p
        raise KeyError(f"no power point for batch size {batch_size} at {power_limit_w} W")


def _read(path: Path, columns: tuple[str, ...], flag: str) -> list[dict[str, str]]:
    """The rows of a trace CSV that must have `columns`; every row as long as the header."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise UsageError(
                    f"{flag} {path}: missing column(s) {', '.join(missing)}; expected Zeus's format "
                    f"with columns {','.join(columns)}"
                )
            rows = []
            for row in reader:
                if None in row or None in row.values():
                    cut = "more" if None in row else "fewer"
                    raise UsageError(
                        f"{flag} {path}:{reader.line_num}: {cut} fields than the header; "
                        "each row needs one value per column"
                    )
                if any("\x00" in value for value in row.values()):
                    raise UsageError(f"{flag} {path}:{reader.line_num}: holds binary data, not CSV text")
                rows.append(row)
            return rows
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot read it ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{flag} {path}: not UTF-8 text (byte {err.start}); pass Zeus's CSV trace") from None
    except csv.Error as err:
        raise UsageError(f"{flag} {path}: not a valid CSV file ({err})") from None


def _number(row: dict[str, str], column: str, path: Path, line: int) -> float:
    try:
        return float(row[column])
    except (TypeError, ValueError) as err:
        raise UsageError(f"{path}:{line}: column {column} must be a number (got {row[column]!r})") from err


def _int(row: dict[str, str], column: str, path: Path, line: int) -> int:
    value = _number(row, column, path, line)
    if not value.is_integer() or value <= 0:
        raise UsageError(f"{path}:{line}: column {column} must be a positive integer (got {row[column]!r})")
    return int(value)


def _duplicate(path: Path, line: int, first: int, what: str, fields: str, earlier: object, later: object) -> None:
    """A row that repeats an earlier one: identical, it is dropped with a warning; else a `UsageError`."""
    same = earlier == later or (
        isinstance(earlier, float) and isinstance(later, float) and math.isnan(earlier) and math.isnan(later)
    )
    if not same:
        raise UsageError(
            f"{path}:{line}: {what} repeats line {first} with a different {fields}; keep one row of the two"
        )
    warnings.warn(f"wattwise: {path}:{line} repeats line {first} ({what}); the repeat is ignored", stacklevel=3)


def load_trace(
    train_path: Path,
    power_path: Path,
    workload: str,
    target_metric: float,
    optimizer: str | None = None,
) -> WorkloadTrace:
    """Load `workload` ("DATASET/NETWORK") at `target_metric` from a train and a power trace."""
    if workload.count("/") != 1 or not all(workload.split("/")):
        raise UsageError(f"--workload must be DATASET/NETWORK, e.g. cifar100/shufflenetv2 (got {workload!r})")
    dataset, network = workload.split("/")
    train = _read(train_path, TRAIN_COLUMNS, "--train")
    power = _read(power_path, POWER_COLUMNS, "--power")

    mine = [r for r in train if r["dataset"] == dataset and r["network"] == network]
    if not mine:
        known = sorted({f"{r['dataset']}/{r['network']}" for r in train})
        raise UsageError(f"--workload {workload} is not in {train_path}; it has {', '.join(known)}")
    optimizers = sorted({r["optimizer"] for r in mine})
    if optimizer is None:
        if len(optimizers) > 1:
            raise UsageError(f"--optimizer is needed: {workload} was traced with {', '.join(optimizers)}")
        optimizer = optimizers[0]
    elif optimizer not in optimizers:
        raise UsageError(f"--optimizer {optimizer} is not traced for {workload}; pick one of {', '.join(optimizers)}")

    epochs: dict[int, list[float]] = defaultdict(list)
    targets: set[float] = set()
    runs: dict[tuple[int, str, str], tuple[int, float]] = {}
    for line, row in enumerate(train, start=2):
        if row["dataset"] != dataset or row["network"] != network or row["optimizer"] != optimizer:
            continue
        metric = _number(row, "target_metric", train_path, line)
        targets.add(metric)
        if math.isclose(metric, target_metric, rel_tol=1e-9, abs_tol=1e-12):
            epoch = _number(row, "target_epoch", train_path, line)
            if not (math.isnan(epoch) or epoch >= 1):
                raise UsageError(f"{train_path}:{line}: target_epoch must be >= 1 or nan (got {epoch})")
            batch_size = _int(row, "batch_size", train_path, line)
            run = (batch_size, (row.get("learning_rate") or "").strip(), row["run"].strip())
            if run in runs:
                first, earlier = runs[run]
                what = f"batch_size {batch_size}, run {run[2]} at target_metric {metric:g}"
                _duplicate(train_path, line, first, what, "target_epoch", earlier, epoch)
                continue
            runs[run] = (line, epoch)
            epochs[batch_size].append(epoch)
    if not epochs:
        shown = ", ".join(f"{t:g}" for t in sorted(targets))
        raise UsageError(f"--target-metric {target_metric:g} is not traced for {workload}; traced targets: {shown}")

    points: dict[int, dict[float, PowerPoint]] = defaultdict(dict)
    point_lines: dict[tuple[int, float], int] = {}
    max_power_w = 0.0
    for line, row in enumerate(power, start=2):
        limit = _number(row, "power_limit", power_path, line)
        max_power_w = max(max_power_w, limit)
        if row["dataset"] != dataset or row["network"] != network or row["optimizer"] != optimizer:
            continue
        point = PowerPoint(
            power_limit_w=limit,
            time_per_epoch_s=_number(row, "time_per_epoch", power_path, line),
            average_power_w=_number(row, "average_power", power_path, line),
        )
        if not all(math.isfinite(v) and v > 0 for v in (point.time_per_epoch_s, point.average_power_w, limit)):
            raise UsageError(
                f"{power_path}:{line}: power_limit, time_per_epoch and average_power must be finite numbers > 0"
            )
        for column, value, bound in (
            ("power_limit", limit, POWER_W),
            ("time_per_epoch", point.time_per_epoch_s, TIME_S),
            ("average_power", point.average_power_w, POWER_W),
        ):
            bound.check(value, f"{power_path}:{line}: column {column}")
        batch_size = _int(row, "batch_size", power_path, line)
        if limit in points[batch_size]:
            _duplicate(
                power_path,
                line,
                point_lines[(batch_size, limit)],
                f"batch_size {batch_size} at power_limit {limit:g} W",
                "time_per_epoch and average_power",
                points[batch_size][limit],
                point,
            )
            continue
        point_lines[(batch_size, limit)] = line
        points[batch_size][limit] = point

    common = sorted(set(epochs) & set(points))
    if not common:
        raise UsageError(
            f"--power {power_path} has no batch size of {workload} ({optimizer}) that --train {train_path} has"
        )
    return WorkloadTrace(
        dataset=dataset,
        network=network,
        optimizer=optimizer,
        target_metric=target_metric,
        target_epochs={b: tuple(epochs[b]) for b in common},
        power={b: tuple(points[b][pl] for pl in sorted(points[b])) for b in common},
        max_power_w=max_power_w,
    )
