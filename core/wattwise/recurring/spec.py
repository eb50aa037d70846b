"""The data of recurring jobs: what a job is, what one run of it did, what the optimizer recommends.

A recurring job is the same training (same model, new data or seed) run again and again. Each run
trains with one batch size until the target metric is reached, the early-stopping rule stops it, or the
maximum number of epochs runs out. All quantities are in SI units: joules, seconds, watts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from wattwise.errors import Key, UsageError
from wattwise.names import check_job_name
from wattwise.power_limit import check_eta, zeus_cost
from wattwise.vocabulary import MetricMode, RecurringPhase, RecurringRunState

#: A metric mode as the adapters take it: the member, or its value as a user writes it.
MetricModeName = MetricMode | Literal["max", "min"]


#: Why a run got its batch size: a `RecurringPhase`, or its string (as a store's row holds it).
Phase = RecurringPhase | Literal["explore", "exploit", "concurrent"]

#: Where a run stands: a `RecurringRunState`, or its string (as a store's row holds it).
RunState = RecurringRunState | Literal["open", "reached", "failed"]


@dataclass(frozen=True)
class JobSpec:
    """One recurring job and the knobs of its optimizer.

    `max_power_w` is the highest power limit summed over the job's GPUs: the price of one second in
    the cost `eta * E + (1 - eta) * max_power_w * T` (joules). `beta` bounds the cost of any run:
    a run stops once its cost would exceed `beta` times the least cost of a run that reached the target.
    """

    name: str
    batch_sizes: tuple[int, ...]
    default_batch_size: int
    target_metric: float
    max_epochs: int
    max_power_w: float
    metric_mode: MetricMode = MetricMode.MAX
    eta: float = 0.5
    beta: float = 2.0

    def __post_init__(self) -> None:
        check_job_name(self.name)
        sizes = tuple(self.batch_sizes)
        if not sizes or any(not isinstance(b, int) or isinstance(b, bool) or b <= 0 for b in sizes):
            raise UsageError(f"batch_sizes must be a non-empty list of positive integers (got {list(sizes)})")
        if len(set(sizes)) != len(sizes):
            raise UsageError(f"batch_sizes must not repeat a value (got {list(sizes)})")
        object.__setattr__(self, "batch_sizes", tuple(sorted(sizes)))
        if self.default_batch_size not in self.batch_sizes:
            raise UsageError(
                Key("default_batch_size"),
                f" {self.default_batch_size} is not one of batch_sizes "
                f"{list(self.batch_sizes)}; add it or pick one of them",
            )
        if not math.isfinite(self.target_metric):
            raise UsageError(Key("target_metric"), f" must be a finite number (got {self.target_metric})")
        if self.metric_mode not in tuple(MetricMode):
            raise UsageError(
                f"metric_mode must be 'max' (higher is better, e.g. accuracy) or 'min' (e.g. loss), "
                f"got {self.metric_mode!r}"
            )
        object.__setattr__(self, "metric_mode", MetricMode(self.metric_mode))  # a string of the set: its member
        if not isinstance(self.max_epochs, int) or isinstance(self.max_epochs, bool) or self.max_epochs < 1:
            raise UsageError(Key("max_epochs"), f" must be a positive integer (got {self.max_epochs!r})")
        if not (self.max_power_w > 0 and math.isfinite(self.max_power_w)):
            raise UsageError(
                f"max_power_w must be a positive number of watts, the highest power limit summed over the "
                f"job's GPUs (got {self.max_power_w})"
            )
        check_eta(self.eta)
        if not (self.beta > 1.0) or math.isnan(self.beta):
            beta = Key("beta")
            raise UsageError(
                beta,
                f" must be greater than 1 (got {self.beta}); runs stop once their cost exceeds ",
                beta,
                " times the least cost seen, use a large value such as 1e9 to never stop early",
            )

    def cost(self, energy_j: float, time_s: float) -> float:
        """The job's cost of spending `energy_j` and `time_s` (joules)."""
        return zeus_cost(energy_j, time_s, eta=self.eta, max_power_w=self.max_power_w)

    def reached(self, metric: float | None) -> bool:
        """True when `metric` meets the target in the job's direction."""
        if metric is None or math.isnan(metric):
            return False
        return metric >= self.target_metric if self.metric_mode is MetricMode.MAX else metric <= self.target_metric


@dataclass(frozen=True)
class StoredRun:
    """One run of a job as the store keeps it. Cost, energy and time are None while the run is open."""

    run_id: int
    batch_size: int
    phase: Phase
    state: RunState
    started_at_s: float
    updated_at_s: float
    power_limit_w: float | None = None
    #: The run stops before its cost exceeds this (joules), or `beta` times the least cost seen if less.
    cost_limit: float = math.inf
    epochs: int = 0
    energy_j: float | None = None
    time_s: float | None = None
    cost: float | None = None

    @property
    def finished(self) -> bool:
        """Whether the run is no longer open (it reached its target or failed)."""
        return self.state != RecurringRunState.OPEN

    @property
    def reached(self) -> bool:
        """Whether the run reached its target metric."""
        return self.state == RecurringRunState.REACHED

    def recommendation(self) -> Recommendation:
        """What the run should use, as `BatchSizeOptimizer.next_batch_size` hands it out.

        Every field of a `Recommendation` is one of this run's own, under the same name.
        """
        return Recommendation(**{f.name: getattr(self, f.name) for f in fields(Recommendation)})


@dataclass(frozen=True)
class Recommendation:
    """What a run should use: its id (to report back), a batch size, and the remembered power limit.

    `power_limit_w` is None when this batch size has no power limit yet: the run profiles power limits
    and reports the choice with `BatchSizeOptimizer.remember_power_limit`.
    """

    run_id: int
    batch_size: int
    power_limit_w: float | None
    phase: Phase
    #: The run stops before its cost would exceed this (joules); infinite until a run reached the target.
    cost_limit: float = math.inf
