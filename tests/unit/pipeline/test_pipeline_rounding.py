"""From relaxed solutions to real plans: the option lookup, tracking and polishing."""

from __future__ import annotations

import numpy as np

from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.pipeline.relaxation import ConvexRelaxation, option_costs_j, pareto_order
from wattwise.pipeline.rounding import LevelKeys, LevelPicker, OptionMap, polish, track

UNIT_S = 0.001


def test_option_lookup_returns_the_slowest_option_within_budget():
    rng = np.random.default_rng(0)
    per_type = []
    for kind in range(5):
        times = np.sort(rng.choice(np.arange(1, 400), 30, replace=False)) * 1e-4
        per_type.append((times, np.arange(30) + 100 * kind))
    option_map = OptionMap.build(per_type)
    types = rng.integers(0, 5, 500)
    budgets = rng.uniform(0.0, 0.05, (500, 3))
    budgets[:20, 0] = [per_type[t][0][7] for t in types[:20]]  # budgets exactly at an option's time
    got = option_map.choice[option_map.entry(LevelKeys.of(option_map, types), budgets)]
    for i, kind in enumerate(types):
        times, options = per_type[kind]
        for b in range(3):
            fits = np.flatnonzero(times <= budgets[i, b] + 1e-12)
            assert got[i, b] == options[fits[-1] if len(fits) else 0]  # else: the fastest


def test_tracking_and_polishing_keep_plans_on_time_and_polishing_never_costs_more():
    problem = problem_for(synthetic_profile(3, 6, UNIT_S, seed=8), "gpipe", 4, 80.0)
    relaxation = ConvexRelaxation(problem, UNIT_S)
    deadlines = np.arange(relaxation.t_min, relaxation.t_max + 1, 25)
    events = relaxation.solve().events(deadlines)
    inn = 2 + 2 * np.arange(problem.dag.num_nodes)
    deadline_s = deadlines * UNIT_S
    times, costs = problem.option_time_s, option_costs_j(problem)
    options = LevelPicker(
        OptionMap.build(
            [(times[o], o) for o in (pareto_order(problem, k, times, costs) for k in range(problem.num_types))]
        ),
        problem,
    )
    vertices = LevelPicker(OptionMap.build([(times[h.options], h.options) for h in relaxation.hulls]), problem)
    for picker in (options, vertices):
        tracked, tracked_s = track(problem, picker, events[inn + 1] * UNIT_S)
        assert np.allclose(tracked_s, problem.evaluate_by_node(tracked)[0], rtol=1e-12)
        assert np.all(tracked_s <= deadline_s + 1e-12)
        polished, time_s = polish(problem, options, tracked, deadline_s)
        assert np.allclose(time_s, problem.evaluate_by_node(polished)[0], rtol=1e-12)
        assert np.all(time_s <= deadline_s + 1e-12)
        assert np.all(costs[polished].sum(axis=0) <= costs[tracked].sum(axis=0) + 1e-9)
