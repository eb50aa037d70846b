"""What a job's history amounts to: counts, totals and per-batch-size figures (pure, for the CLI)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from wattwise.recurring.policy import best_so_far, outcomes_by_batch_size, recurrence_cost_means
from wattwise.recurring.spec import JobSpec, StoredRun
from wattwise.vocabulary import RecurringRunState


@dataclass(frozen=True)
class BatchSizeSummary:
    """Runs of one batch size: how many reached the target, their mean cost and epochs, its power limit."""

    batch_size: int
    runs: int
    reached: int
    failed: int
    open: int
    mean_reached_cost: float | None
    mean_reached_epochs: float | None
    recurrence_cost: float | None
    power_limit_w: float | None


@dataclass(frozen=True)
class JobSummary:
    """A job's history in a few numbers. Totals count finished runs only (joules, seconds)."""

    name: str
    runs: int
    reached: int
    failed: int
    open: int
    energy_j: float
    time_s: float
    cost: float
    best_batch_size: int
    batch_sizes: tuple[BatchSizeSummary, ...]

    def to_dict(self) -> dict[str, object]:
        """The summary as plain JSON-ready values (the fields above, `batch_sizes` as a list of objects)."""
        return dataclasses.asdict(self)


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def summarize(spec: JobSpec, runs: Sequence[StoredRun], power_limits: Mapping[int, float]) -> JobSummary:
    """Summarize `runs` of `spec`; `best_batch_size` is the one of least mean recurrence cost so far."""
    finished = [r for r in runs if r.finished]
    recurrence = recurrence_cost_means(outcomes_by_batch_size(runs))
    per_size = []
    for batch_size in spec.batch_sizes:
        mine = [r for r in runs if r.batch_size == batch_size]
        reached = [r for r in mine if r.reached]
        per_size.append(
            BatchSizeSummary(
                batch_size=batch_size,
                runs=len(mine),
                reached=len(reached),
                failed=sum(r.state == RecurringRunState.FAILED for r in mine),
                open=sum(not r.finished for r in mine),
                mean_reached_cost=_mean([r.cost for r in reached if r.cost is not None]),
                mean_reached_epochs=_mean([float(r.epochs) for r in reached]),
                recurrence_cost=recurrence.get(batch_size),
                power_limit_w=power_limits.get(batch_size),
            )
        )
    return JobSummary(
        name=spec.name,
        runs=len(runs),
        reached=sum(r.reached for r in runs),
        failed=sum(r.state == RecurringRunState.FAILED for r in runs),
        open=len(runs) - len(finished),
        energy_j=math.fsum(r.energy_j or 0.0 for r in finished),
        time_s=math.fsum(r.time_s or 0.0 for r in finished),
        cost=math.fsum(r.cost or 0.0 for r in finished),
        best_batch_size=best_so_far(spec, outcomes_by_batch_size(runs)),
        batch_sizes=tuple(per_size),
    )
