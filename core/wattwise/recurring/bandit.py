"""Gaussian Thompson sampling arithmetic (pure).

Each arm (batch size) has an unknown mean; observations of an arm are that mean plus Gaussian noise of
known variance s^2, and the belief about the mean is Gaussian (the conjugate prior). After n
observations x_1..x_n, a prior N(m0, 1/t0) becomes

    t_n = t0 + n / s^2,        m_n = (t0 * m0 + sum(x) / s^2) / t_n.

Thompson sampling draws one mean per arm from its belief and plays the best draw. Zero noise means the
observations are exact: the belief is a point at their average.

`shrink_to_common_mean` fits the arms' prior itself (empirical Bayes): arm means scatter around a
common mean, so an arm observed once borrows strength from the others when they agree, and stands on
its own data when they do not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GaussianBelief:
    """Belief about an arm's mean: N(mean, 1 / precision). Precision 0 means no information."""

    mean: float
    precision: float

    @property
    def std(self) -> float:
        """Standard deviation of the belief; infinite without information, 0 when exact."""
        if self.precision == 0:
            return math.inf
        return 0.0 if math.isinf(self.precision) else 1.0 / math.sqrt(self.precision)


FLAT_PRIOR = GaussianBelief(mean=0.0, precision=0.0)


def posterior(observations: Sequence[float], noise_std: float, prior: GaussianBelief = FLAT_PRIOR) -> GaussianBelief:
    """The conjugate Gaussian update of `prior` after `observations` with noise `noise_std`."""
    if noise_std < 0 or math.isnan(noise_std):
        raise ValueError(f"noise_std must be >= 0 (got {noise_std})")
    n = len(observations)
    if n == 0:
        return prior
    total = math.fsum(observations)
    if noise_std == 0:
        return GaussianBelief(mean=total / n, precision=math.inf)
    precision = prior.precision + n / noise_std**2
    mean = (prior.precision * prior.mean + total / noise_std**2) / precision
    return GaussianBelief(mean=mean, precision=precision)


def draw(belief: GaussianBelief, rng: np.random.Generator) -> float:
    """One Thompson draw from `belief` (its mean when the belief is exact)."""
    if belief.precision <= 0:
        raise ValueError("cannot draw from a belief without information; observe the arm first")
    return belief.mean if belief.std == 0 else float(rng.normal(belief.mean, belief.std))


def thompson_pick(beliefs: Mapping[int, GaussianBelief], rng: np.random.Generator) -> int:
    """The arm whose mean cost, drawn from its belief, is least (ties go to the smaller arm)."""
    if not beliefs:
        raise ValueError("thompson_pick needs at least one arm")
    draws = {arm: draw(beliefs[arm], rng) for arm in sorted(beliefs)}
    return min(draws, key=lambda arm: (draws[arm], arm))


@dataclass(frozen=True)
class SharedFit:
    """Arm means that share one distribution.

    Observations of arm b are N(theta_b, noise_var) and the arm means theta_b are N(grand_mean, spread_var).
    """

    noise_var: float
    spread_var: float
    grand_mean: float
    beliefs: dict[int, GaussianBelief]


def shrink_to_common_mean(
    groups: Mapping[int, Sequence[float]],
    *,
    prior_noise_std: float,
    prior_spread_std: float,
    prior_weight: float,
    min_spread_std: float = 0.01,
) -> SharedFit:
    """Fit the normal-normal model to `groups` (arm -> observations; arms without any are ignored).

    The noise variance pools every arm's deviations from its own average. The spread of the arm means is
    the variance of the arms' averages less the part that the noise explains (method of moments),
    floored at `min_spread_std`. Both carry `prior_weight` pseudo-degrees of freedom at their prior
    value. Each arm's belief is the precision-weighted mix of the grand mean and its own average.
    """
    observed = {arm: list(values) for arm, values in groups.items() if values}
    if not observed:
        raise ValueError("shrink_to_common_mean needs at least one observation")
    averages = {arm: math.fsum(values) / len(values) for arm, values in observed.items()}
    within = prior_weight * prior_noise_std**2 + math.fsum(
        (v - averages[arm]) ** 2 for arm, values in observed.items() for v in values
    )
    within_dof = prior_weight + sum(len(values) - 1 for values in observed.values())
    noise_var = within / within_dof if within_dof > 0 else prior_noise_std**2
    grand_mean = math.fsum(averages.values()) / len(averages)
    between = prior_weight * prior_spread_std**2 + math.fsum((a - grand_mean) ** 2 for a in averages.values())
    between_dof = prior_weight + len(averages) - 1
    explained = math.fsum(noise_var / len(values) for values in observed.values()) / len(observed)
    spread_var = max(min_spread_std**2, (between / between_dof if between_dof > 0 else 0.0) - explained)
    prior = GaussianBelief(mean=grand_mean, precision=1.0 / spread_var)
    beliefs = {arm: posterior(values, math.sqrt(noise_var), prior) for arm, values in observed.items()}
    return SharedFit(noise_var=noise_var, spread_var=spread_var, grand_mean=grand_mean, beliefs=beliefs)
