"""Plans and frontiers as data: choosing a point, assembling a frontier, files round trips."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from test_pipeline_support import problem_for, synthetic_profile

from wattwise.errors import UsageError
from wattwise.pipeline.files import read_frontier_json, write_frontier_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import (
    Frontier,
    FrontierEntry,
    assemble_frontier,
    choice_from_plan,
    choose_for_straggler,
    choose_intrinsic,
    plan_from_choice,
)
from wattwise.pipeline.schedule import Step

UNIT_S = 0.001
PLAN = ((Step("forward", 0, 1000), Step("backward", 0, 1000)),) * 2


def frontier_of(points: list[tuple[float, float, bool]]) -> Frontier:
    return Frontier(
        stages=2, microbatches=1, schedule="gpipe", unit_time_s=0.1, p_blocking_w=50.0,
        points=tuple(FrontierEntry(t, e, PLAN if planned else None) for t, e, planned in points),
        max_frequency_time_s=10.0, max_frequency_energy_j=1000.0,
    )


FRONTIER = frontier_of([(9.9, 900.0, True), (10.0, 850.0, True), (10.2, 700.0, False), (10.5, 800.0, True),
                        (12.0, 820.0, True)])


def test_intrinsic_choice_is_the_least_energy_no_slower_than_maximum_frequency():
    choice = choose_intrinsic(FRONTIER)
    assert (choice.entry.time_s, choice.energy_j) == (10.0, 850.0)
    assert choice.saving == pytest.approx(0.15)
    assert choice.slowdown == pytest.approx(0.0)


def test_straggler_choice_counts_blocking_until_the_straggler_time():
    # At T' = 12: 900 + 2 GPUs x 50 W x 2.1 s = 1110, 850 + 200 = 1050, 800 + 150 = 950, 820 + 0 = 820.
    choice = choose_for_straggler(FRONTIER, 12.0)
    assert choice.entry.time_s == 12.0 and choice.energy_j == pytest.approx(820.0)
    assert choice.saving == pytest.approx(1 - 820.0 / (1000.0 + 100.0 * 2.0))
    # At T' = 10.6 the 12 s plan is too slow; 800 + 100 x 0.1 = 810 is the least.
    assert choose_for_straggler(FRONTIER, 10.6).energy_j == pytest.approx(810.0)


def test_points_without_a_plan_are_not_chosen():
    assert choose_for_straggler(FRONTIER, 10.3).entry.time_s == 10.0  # 10.2 s has no plan


def test_a_straggler_faster_than_every_plan_is_a_usage_error():
    with pytest.raises(UsageError, match=r"no plan finishes by the straggler time 9.0 s \(the fastest takes 9.9 s\)"):
        choose_for_straggler(FRONTIER, 9.0)


def test_plan_and_choice_round_trip():
    problem = problem_for(synthetic_profile(3, 4, UNIT_S, seed=2), "1f1b", 3, 80.0)
    rng = np.random.default_rng(0)
    choice = np.asarray([rng.choice(list(problem.type_options(int(k)))) for k in problem.node_type])
    plan = plan_from_choice(problem, choice)
    assert [[(s.instruction, s.microbatch) for s in steps] for steps in plan] == [
        [(s.instruction, s.microbatch) for s in steps] for steps in problem.dag.steps]
    assert np.array_equal(choice_from_plan(problem, plan), choice)


def test_a_plan_with_an_unprofiled_frequency_is_rejected():
    problem = problem_for(synthetic_profile(2, 3, UNIT_S, seed=2), "1f1b", 2, 80.0)
    plan = plan_from_choice(problem, problem.max_frequency_choice())
    bad = ((Step("forward", 0, 1234), *plan[0][1:]), plan[1])
    with pytest.raises(UsageError, match="stage 0 forward was not profiled at 1234 MHz"):
        choice_from_plan(problem, bad)


def test_assembled_frontier_keeps_useful_points_and_the_plans_that_matter():
    problem = problem_for(synthetic_profile(3, 6, UNIT_S, seed=7), "1f1b", 4, 80.0)
    points = list(FrontierSolver(problem, UNIT_S).run())
    some = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast")
    everything = assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast", plans="all")
    assert all(p.plan is not None for p in everything.points)
    assert [p.time_s for p in some.points] == [p.time_s for p in everything.points]
    # Useful: each slower point needs less compute energy sum(e - P_b t) than every faster one.
    compute = [some.compute_only_j(p) for p in some.points]
    assert all(b < a for a, b in itertools.pairwise(compute))
    # The default keeps the plans of the intrinsic choice and of the ends.
    assert choose_intrinsic(some).entry == choose_intrinsic(everything).entry
    assert some.points[0].plan is not None and some.points[-1].plan is not None
    # Each stored plan's figures are its own, from the profile.
    for entry in everything.points[:: max(1, len(everything.points) // 10)]:
        assert entry.plan is not None
        time_s, energy_j = problem.evaluate(choice_from_plan(problem, entry.plan))
        assert (float(time_s), float(energy_j)) == pytest.approx((entry.time_s, entry.energy_j), rel=1e-12)


def test_frontier_json_round_trip(tmp_path):
    write_frontier_json(FRONTIER, tmp_path / "f.json")
    assert read_frontier_json(tmp_path / "f.json") == FRONTIER


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.pop("stages"), r"stages must be a positive integer \(got None\)"),
        (lambda d: d.update(schedule="zb"), "schedule must be one of"),
        (lambda d: d["points"][0].update(time_s=-1), r"points\[0\]: time_s must be a finite number >= 0"),
        (lambda d: d["points"][1]["plan"][0].__setitem__(1, ["forward", 0]), r"points\[1\]: plan\[0\]\[1\] must be"),
        (lambda d: d.pop("max_frequency"), "max_frequency must be an object"),
    ],
)
def test_a_bad_frontier_file_names_the_field(tmp_path, edit, message):
    write_frontier_json(FRONTIER, tmp_path / "f.json")
    data = json.loads((tmp_path / "f.json").read_text())
    edit(data)
    (tmp_path / "f.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match=message):
        read_frontier_json(tmp_path / "f.json")
