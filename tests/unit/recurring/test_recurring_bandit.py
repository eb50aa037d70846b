"""Gaussian posterior arithmetic, Thompson draws, and the empirical-Bayes sharing between arms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wattwise.recurring.bandit import (
    FLAT_PRIOR,
    GaussianBelief,
    draw,
    posterior,
    shrink_to_common_mean,
    thompson_pick,
)


def test_posterior_of_informative_prior_mixes_prior_and_data_by_precision() -> None:
    # Prior N(10, 1/0.5); two observations 12 and 14 with noise std 2 (precision 1/4 each).
    belief = posterior([12.0, 14.0], noise_std=2.0, prior=GaussianBelief(mean=10.0, precision=0.5))
    assert belief.precision == pytest.approx(0.5 + 2 / 4)
    assert belief.mean == pytest.approx((0.5 * 10 + (12 + 14) / 4) / (0.5 + 2 / 4))
    assert belief.std == pytest.approx(1.0)


def test_posterior_under_flat_prior_is_the_sample_mean_with_shrinking_spread() -> None:
    data = [3.0, 5.0, 7.0, 9.0]
    belief = posterior(data, noise_std=2.0)
    assert belief.mean == pytest.approx(6.0)
    assert belief.std == pytest.approx(2.0 / math.sqrt(len(data)))
    assert posterior(data[:1], noise_std=2.0).std == pytest.approx(2.0)


def test_exact_observations_give_a_point_belief_and_no_observation_keeps_the_prior() -> None:
    exact = posterior([4.0, 6.0], noise_std=0.0)
    assert exact.mean == 5.0 and exact.std == 0.0
    assert draw(exact, np.random.default_rng(0)) == 5.0
    assert posterior([], noise_std=1.0) == FLAT_PRIOR
    with pytest.raises(ValueError, match="without information"):
        draw(FLAT_PRIOR, np.random.default_rng(0))


def test_sequential_updates_equal_one_batch_update() -> None:
    prior = GaussianBelief(mean=0.0, precision=0.1)
    once = posterior([1.0, 2.0, 4.0], noise_std=1.5, prior=prior)
    step = posterior([1.0], noise_std=1.5, prior=prior)
    step = posterior([2.0, 4.0], noise_std=1.5, prior=step)
    assert step.mean == pytest.approx(once.mean)
    assert step.precision == pytest.approx(once.precision)


def test_thompson_pick_prefers_the_cheaper_arm_in_proportion_to_the_overlap() -> None:
    rng = np.random.default_rng(7)
    clear = {8: GaussianBelief(1.0, 1 / 0.01**2), 16: GaussianBelief(2.0, 1 / 0.01**2)}
    assert {thompson_pick(clear, rng) for _ in range(200)} == {8}
    even = {8: GaussianBelief(1.0, 1.0), 16: GaussianBelief(1.0, 1.0)}
    share = sum(thompson_pick(even, rng) == 8 for _ in range(4000)) / 4000
    assert 0.45 < share < 0.55
    # P(N(1, 1) < N(1.5, 1)) = Phi(0.5 / sqrt(2)) = 0.638
    lean = {8: GaussianBelief(1.0, 1.0), 16: GaussianBelief(1.5, 1.0)}
    share = sum(thompson_pick(lean, rng) == 8 for _ in range(4000)) / 4000
    assert share == pytest.approx(0.638, abs=0.03)


def test_arms_that_agree_lend_a_once_observed_arm_their_mean() -> None:
    # Three arms whose runs scatter by about 0.13 around 2.0, and one arm observed once, at 2.2.
    groups = {8: [1.9, 2.1, 2.0], 16: [2.1, 1.9, 2.0], 32: [2.0, 2.2, 1.8], 64: [2.2]}
    fit = shrink_to_common_mean(groups, prior_noise_std=0.1, prior_spread_std=0.1, prior_weight=2.0)
    # Its single run says little against three arms that agree: most of the way to the common mean.
    assert abs(fit.beliefs[64].mean - fit.grand_mean) < 0.25 * abs(2.2 - fit.grand_mean)
    assert fit.beliefs[64].std < math.sqrt(fit.noise_var)


def test_arms_far_apart_stand_on_their_own_data() -> None:
    groups = {8: [1.0, 1.1, 0.9], 16: [3.0, 3.1, 2.9], 32: [5.0, 5.1, 4.9], 64: [7.0]}
    fit = shrink_to_common_mean(groups, prior_noise_std=0.1, prior_spread_std=0.1, prior_weight=2.0)
    assert fit.spread_var > 1.0
    for arm, values in groups.items():
        assert fit.beliefs[arm].mean == pytest.approx(sum(values) / len(values), abs=0.05)


def test_noise_estimate_pools_every_arm_and_respects_the_prior_weight() -> None:
    groups = {8: [1.0, 3.0], 16: [10.0, 14.0]}
    fit = shrink_to_common_mean(groups, prior_noise_std=0.0, prior_spread_std=1.0, prior_weight=1.0)
    # Squared deviations 1 + 1 + 4 + 4 over 1 (prior) + 1 + 1 degrees of freedom.
    assert fit.noise_var == pytest.approx(10 / 3)
    with pytest.raises(ValueError):
        shrink_to_common_mean({8: []}, prior_noise_std=0.1, prior_spread_std=0.1, prior_weight=1.0)
