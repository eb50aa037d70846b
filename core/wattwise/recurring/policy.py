"""The batch-size policy of recurring jobs (pure: history in, decision out).

Zeus (NSDI'23) explores by pruning, then exploits with Gaussian Thompson sampling:

- Pruning starts at the default batch size and walks downward, then upward from the default; a
  direction stops at the first batch size that fails to reach the target. Zeus runs two rounds, the
  second over the survivors of the first and starting from the first round's cheapest batch size.
- Thompson sampling then draws a mean cost per surviving batch size from its Gaussian posterior (each
  batch size's own mean and variance) and runs the least draw.

wattwise keeps that skeleton and changes four things, each measured with the trace simulator (see
the README):

- One pruning round, run as a line search: a direction also stops at a batch size whose run cost more
  than `1 + prune_margin` times the best so far, and the upward direction is skipped when the downward
  one already found a batch size that much cheaper than the default.
- The bandit models what varies between runs: a run's cost is its batch size's cost per epoch (measured
  exactly by any run) times the epochs it needed to reach the target (noisy). Epochs to target are
  shared across batch sizes by empirical Bayes, so one run of a batch size is enough to rank it when
  the batch sizes agree, and each stands on its own data when they do not.
- A run that fails is charged, in the bandit, its own cost plus the run that must follow it: the bandit
  minimises the cost of a whole recurrence.
- Pruning is not final: when the bandit picks a batch size next to one never tried, that one is explored
  (a noisy run that stopped a direction too early is caught up with).

Every decision is a function of the job's run history, never of hidden state: the store holds the
history, so every process (and every machine sharing a store) decides from the same facts, and the
exploration resumes after a crash. Randomness comes from an explicit `numpy.random.Generator`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from wattwise.errors import UsageError
from wattwise.recurring.bandit import (
    GaussianBelief,
    draw,
    posterior,
    shrink_to_common_mean,
    thompson_pick,
)
from wattwise.recurring.spec import JobSpec, Phase, StoredRun
from wattwise.vocabulary import BanditModel, RecurringPhase, StopReason

#: A bandit model's name: a `BanditModel`, or its string.
BanditModelName = BanditModel | Literal["shared-epochs", "per-arm"]


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the policy. The defaults are wattwise's; `ZEUS_POLICY` is Zeus's published policy."""

    #: Rounds of pruning exploration (Zeus: 2).
    pruning_rounds: int = 1
    #: Pruning as a line search (None: Zeus, a direction stops only at a failure). A direction also
    #: stops at a batch size that cost more than `1 + prune_margin` times the best so far, and the
    #: upward direction is skipped when the downward one found a batch size that much cheaper than the
    #: default. The margin absorbs run-to-run noise: one epoch more or less is 25% of a 4-epoch run.
    prune_margin: float | None = 0.5
    #: "shared-epochs": cost = cost per epoch x epochs to target, with epochs shared across batch
    #: sizes by empirical Bayes, failed runs charged their retry. "per-arm": Zeus, a Gaussian on each
    #: batch size's raw run costs, with that batch size's own variance.
    bandit: BanditModelName = BanditModel.SHARED_EPOCHS
    #: Priors of the shared-epochs model, on the natural log of the epochs to target: how much it varies
    #: between runs of one batch size, how much its mean varies between batch sizes, and the weight of
    #: both priors in pseudo-observations.
    epochs_noise_prior: float = 0.05
    epochs_spread_prior: float = 0.1
    prior_weight: float = 10.0
    #: Pruning is undone where the bandit disagrees with it: when Thompson sampling picks a batch size
    #: next to one that no run has tried (a direction stopped there, on one noisy run perhaps), that
    #: neighbour is explored. Zeus: never (its bandit only knows the survivors of pruning).
    resume_exploration: bool = True

    def __post_init__(self) -> None:
        if self.pruning_rounds < 1:
            raise UsageError(f"pruning_rounds must be at least 1 (got {self.pruning_rounds})")
        if self.prune_margin is not None and not self.prune_margin >= 0:
            raise UsageError(f"prune_margin must be >= 0, or None to prune only on failures (got {self.prune_margin})")
        if self.bandit not in tuple(BanditModel):
            raise UsageError(f"bandit must be {' or '.join(repr(str(b)) for b in BanditModel)} (got {self.bandit!r})")
        for name in ("epochs_noise_prior", "epochs_spread_prior", "prior_weight"):
            if not getattr(self, name) > 0:
                raise UsageError(f"{name} must be > 0 (got {getattr(self, name)})")


WATTWISE_POLICY = PolicyConfig()
ZEUS_POLICY = PolicyConfig(pruning_rounds=2, prune_margin=None, bandit=BanditModel.PER_ARM, resume_exploration=False)
POLICIES: dict[str, PolicyConfig] = {"wattwise": WATTWISE_POLICY, "zeus": ZEUS_POLICY}


@dataclass(frozen=True)
class Outcome:
    """What one finished run taught: whether it reached the target, its cost (J) and its epochs."""

    reached: bool
    cost: float
    epochs: int


@dataclass(frozen=True)
class Decision:
    """The batch size for the next run, why, and the cost (joules) it must stop before exceeding."""

    batch_size: int
    phase: Phase
    cost_limit: float


def outcomes_by_batch_size(runs: Sequence[StoredRun]) -> dict[int, list[Outcome]]:
    """Finished runs grouped by batch size, in the order they started."""
    grouped: dict[int, list[Outcome]] = {}
    for run in sorted(runs, key=lambda r: r.run_id):
        if run.finished and run.cost is not None:
            grouped.setdefault(run.batch_size, []).append(Outcome(run.reached, run.cost, run.epochs))
    return grouped


def exploration_step(
    spec: JobSpec, config: PolicyConfig, outcomes: Mapping[int, Sequence[Outcome]]
) -> int | tuple[int, ...]:
    """Replay pruning over `outcomes`: the next batch size to explore, or the survivors when done.

    Round r uses the r-th outcome of each batch size, so runs of an explored batch size that another
    process started meanwhile count as its later visits. The survivors are sorted; they are empty when
    every explored batch size failed.
    """
    margin = config.prune_margin
    arms = list(spec.batch_sizes)
    start = spec.default_batch_size
    for round_index in range(config.pruning_rounds):
        good: list[int] = []
        best_cost = math.inf
        best_arm = start
        index = arms.index(start)
        down, up = arms[index::-1], arms[index + 1 :]
        for direction in (down, up):
            if direction is up and margin is not None and start in good:
                start_cost = outcomes[start][round_index].cost
                if start_cost > best_cost * (1.0 + margin):
                    break
            for arm in direction:
                seen = outcomes.get(arm, ())
                if len(seen) <= round_index:
                    return arm
                outcome = seen[round_index]
                if not outcome.reached:
                    break
                good.append(arm)
                if outcome.cost < best_cost:
                    best_cost, best_arm = outcome.cost, arm
                elif margin is not None and outcome.cost > best_cost * (1.0 + margin):
                    break
        if not good:
            return ()
        arms = sorted(good)
        start = best_arm
    return tuple(arms)


def least_reached_cost(runs: Sequence[StoredRun]) -> float:
    """The least cost of a run that reached the target (infinite when none did)."""
    costs = [r.cost for r in runs if r.reached and r.cost is not None]
    return min(costs) if costs else math.inf


def reached_means(outcomes: Mapping[int, Sequence[Outcome]]) -> dict[int, float]:
    """Mean cost of the reached runs of each batch size that reached the target at least once."""
    means: dict[int, float] = {}
    for arm, seen in outcomes.items():
        costs = [o.cost for o in seen if o.reached]
        if costs:
            means[arm] = math.fsum(costs) / len(costs)
    return means


def recurrence_cost_means(outcomes: Mapping[int, Sequence[Outcome]]) -> dict[int, float]:
    """Per batch size that reached the target at least once: total cost per reached run.

    A failed run costs itself plus the run that must follow it, priced at the least mean reached cost;
    this is the mean cost of a recurrence that starts with this batch size.
    """
    means = reached_means(outcomes)
    if not means:
        return {}
    retry = min(means.values())
    result: dict[int, float] = {}
    for arm in means:
        seen = outcomes[arm]
        reached = sum(o.reached for o in seen)
        result[arm] = math.fsum(o.cost + (0.0 if o.reached else retry) for o in seen) / reached
    return result


def best_so_far(spec: JobSpec, outcomes: Mapping[int, Sequence[Outcome]]) -> int:
    """The batch size of least mean recurrence cost; the default until some run reached the target."""
    means = recurrence_cost_means(outcomes)
    if not means:
        return spec.default_batch_size
    return min(means, key=lambda arm: (means[arm], arm))


def per_arm_beliefs(arms: Sequence[int], outcomes: Mapping[int, Sequence[Outcome]]) -> dict[int, GaussianBelief]:
    """Zeus's posterior: each batch size's raw run costs, its own variance, a flat prior.

    A batch size whose costs have no spread (one run, or equal runs) has an exact belief, as in Zeus.
    """
    result: dict[int, GaussianBelief] = {}
    for arm in arms:
        costs = [o.cost for o in outcomes[arm]]
        result[arm] = posterior(costs, float(np.std(costs)))
    return result


def shared_epochs_pick(
    config: PolicyConfig, arms: Sequence[int], outcomes: Mapping[int, Sequence[Outcome]], rng: np.random.Generator
) -> int:
    """Thompson sampling on (cost per epoch) x (epochs to target) + (failures' cost per reached run).

    The natural logs of the epochs to target of the reached runs are fitted by `shrink_to_common_mean`;
    each draw is exp(log-epochs draw + noise / 2), the mean of the log-normal run-to-run variation.
    """
    means = reached_means(outcomes)
    retry = min(means.values())
    log_epochs: dict[int, list[float]] = {}
    per_epoch: dict[int, float] = {}
    penalty: dict[int, float] = {}
    for arm in arms:
        reached = [o for o in outcomes[arm] if o.reached and o.epochs > 0]
        if not reached:
            continue
        log_epochs[arm] = [math.log(o.epochs) for o in reached]
        per_epoch[arm] = math.fsum(o.cost / o.epochs for o in reached) / len(reached)
        penalty[arm] = math.fsum(o.cost + retry for o in outcomes[arm] if not o.reached) / len(reached)
    fit = shrink_to_common_mean(
        log_epochs,
        prior_noise_std=config.epochs_noise_prior,
        prior_spread_std=config.epochs_spread_prior,
        prior_weight=config.prior_weight,
    )
    draws = {
        arm: per_epoch[arm] * math.exp(draw(fit.beliefs[arm], rng) + fit.noise_var / 2) + penalty[arm]
        for arm in sorted(log_epochs)
    }
    return min(draws, key=lambda arm: (draws[arm], arm))


def decide(spec: JobSpec, config: PolicyConfig, runs: Sequence[StoredRun], rng: np.random.Generator) -> Decision:
    """The batch size of the next run of `spec`, given every run so far (open ones included).

    While exploration is under way, a run that starts while another exploration run is open gets the
    best batch size so far instead, so that concurrent runs never explore blindly.
    """
    outcomes = outcomes_by_batch_size(runs)
    limit = spec.beta * least_reached_cost(runs)
    step = exploration_step(spec, config, outcomes)
    if isinstance(step, int):
        if any(not r.finished and r.phase == RecurringPhase.EXPLORE for r in runs):
            return Decision(best_so_far(spec, outcomes), RecurringPhase.CONCURRENT, limit)
        return Decision(step, RecurringPhase.EXPLORE, limit)
    candidates = recurrence_cost_means(outcomes)
    if config.resume_exploration:
        arms = sorted(candidates)
    else:
        arms = [arm for arm in step if arm in candidates] or sorted(candidates)
    if not arms:
        return Decision(spec.default_batch_size, RecurringPhase.EXPLOIT, limit)
    if config.bandit == BanditModel.PER_ARM:
        pick = thompson_pick(per_arm_beliefs(arms, outcomes), rng)
    else:
        pick = shared_epochs_pick(config, arms, outcomes, rng)
    if config.resume_exploration and not any(not r.finished and r.phase == RecurringPhase.EXPLORE for r in runs):
        frontier = unexplored_neighbour(spec, pick, outcomes)
        if frontier is not None:
            return Decision(frontier, RecurringPhase.EXPLORE, limit)
    return Decision(pick, RecurringPhase.EXPLOIT, limit)


def unexplored_neighbour(spec: JobSpec, batch_size: int, outcomes: Mapping[int, Sequence[Outcome]]) -> int | None:
    """The next smaller, else the next larger, batch size that no run has tried, if any."""
    index = spec.batch_sizes.index(batch_size)
    neighbours = spec.batch_sizes[index - 1 : index] if index > 0 else ()
    for neighbour in (*neighbours, *spec.batch_sizes[index + 1 : index + 2]):
        if neighbour not in outcomes:
            return neighbour
    return None


def stop_reason(
    spec: JobSpec,
    *,
    epoch: int,
    cost: float,
    last_epoch_cost: float,
    metric: float | None,
    limit: float,
) -> StopReason | None:
    """Why a run should stop after `epoch` epochs that cost `cost` in all, or None to go on.

    The run reached the target; or it used its maximum epochs; or one more epoch, priced like the last
    one, would take its cost above `limit` (so a run never exceeds the limit).
    """
    if spec.reached(metric):
        return StopReason.REACHED
    if epoch >= spec.max_epochs:
        return StopReason.MAX_EPOCHS
    if cost + last_epoch_cost > limit:
        return StopReason.COST
    return None
