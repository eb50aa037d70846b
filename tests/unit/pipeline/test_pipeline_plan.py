"""Plans and frontiers as data: choosing a point, assembling a frontier, files round trips."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.pipeline.files import MAX_PLAN_MATRIX_BYTES, read_frontier_json, write_frontier_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import (
    Frontier,
    FrontierEntry,
    PlanMatrix,
    assemble_frontier,
    choice_from_plan,
    choose_for_straggler,
    choose_intrinsic,
    plan_from_choice,
)
from wattwise.pipeline.profiles import write_profile
from wattwise.pipeline.schedule import Step

UNIT_S = 0.001
PLAN = ((Step("forward", 0, 1000), Step("backward", 0, 1000)),) * 2


def frontier_of(points: list[tuple[float, float, bool]]) -> Frontier:
    return Frontier(
        stages=2,
        microbatches=1,
        schedule="gpipe",
        unit_time_s=0.1,
        p_blocking_w=50.0,
        points=tuple(FrontierEntry(t, e, PLAN if planned else None) for t, e, planned in points),
        max_frequency_time_s=10.0,
        max_frequency_energy_j=1000.0,
    )


FRONTIER = frontier_of(
    [(9.9, 900.0, True), (10.0, 850.0, True), (10.2, 700.0, False), (10.5, 800.0, True), (12.0, 820.0, True)]
)


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
        [(s.instruction, s.microbatch) for s in steps] for steps in problem.dag.steps
    ]
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


# -- every point's plan: the plan matrix -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def solved() -> tuple[Frontier, object]:
    """A frontier of a few hundred points, with its default ~35 spelled-out plans, and its problem."""
    problem = problem_for(synthetic_profile(3, 6, UNIT_S, seed=7), "1f1b", 4, 80.0)
    points = list(FrontierSolver(problem, UNIT_S).run())
    return assemble_frontier(problem, points, unit_time_s=UNIT_S, solver="fast"), problem


def written(frontier: Frontier, path: Path, edit=None) -> Path:
    write_frontier_json(frontier, path)
    if edit is not None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return path


def test_every_kept_point_carries_its_plan_in_the_matrix(solved):
    frontier, problem = solved
    assert frontier.plan_matrix is not None and frontier.plan_matrix.indices.dtype == np.uint8
    assert frontier.plan_matrix.indices.shape == (len(frontier.points), problem.dag.num_nodes)
    assert sum(p.plan is not None for p in frontier.points) < len(frontier.points)  # "some" spelled out
    for k in range(0, len(frontier.points), 7):
        entry = frontier.with_plan(k)
        time_s, energy_j = problem.evaluate(choice_from_plan(problem, entry.plan))
        assert (float(time_s), float(energy_j)) == pytest.approx((entry.time_s, entry.energy_j), rel=1e-12)
        if frontier.points[k].plan is not None:
            assert entry.plan == frontier.points[k].plan


def test_the_straggler_choice_is_the_best_of_every_point(solved, tmp_path):
    frontier, _ = solved
    loaded = read_frontier_json(written(frontier, tmp_path / "f.json"))
    assert loaded == frontier
    only_spelled_out = dataclasses.replace(loaded, plan_matrix=None)  # what a file without the matrix gives
    gained = 0
    for straggler_s in np.linspace(frontier.max_frequency_time_s, 1.05 * frontier.points[-1].time_s, 60):
        best = min(loaded.energy_at_j(p, straggler_s) for p in loaded.points if p.time_s <= straggler_s)
        choice = choose_for_straggler(loaded, straggler_s)
        assert choice.energy_j == best and choice.entry.plan is not None
        before = choose_for_straggler(only_spelled_out, straggler_s)
        assert before.energy_j >= best
        gained += before.energy_j > best
    assert gained > 10  # choosing among every point matters, not only in theory


def test_a_point_without_a_spelled_out_plan_is_chosen_when_the_matrix_has_it():
    matrix = PlanMatrix((1000,), np.zeros((5, 4), dtype=np.uint8))
    frontier = dataclasses.replace(FRONTIER, plan_matrix=matrix)
    choice = choose_for_straggler(frontier, 10.3)  # 10.2 s spells out no plan
    assert choice.entry.time_s == 10.2 and choice.entry.plan == PLAN


def test_a_file_without_the_matrix_still_loads_and_chooses_among_spelled_out_plans(solved, tmp_path):
    frontier, _ = solved
    old = read_frontier_json(written(frontier, tmp_path / "f.json", lambda d: d.pop("plan_matrix")))
    assert old.plan_matrix is None and old.points == frontier.points
    straggler_s = 0.5 * (frontier.max_frequency_time_s + frontier.points[-1].time_s)
    assert choose_for_straggler(old, straggler_s).entry.plan is not None
    assert choose_intrinsic(old) == choose_intrinsic(frontier)


def test_a_matrix_of_more_than_256_frequencies_is_uint16(tmp_path):
    frequencies = tuple(range(500, 800))
    indices = np.arange(5 * 4, dtype=np.uint16).reshape(5, 4) * 14 % 300
    frontier = dataclasses.replace(
        FRONTIER,
        points=tuple(dataclasses.replace(p, plan=None) for p in FRONTIER.points),
        plan_matrix=PlanMatrix(frequencies, indices.astype(np.uint16)),
    )
    path = written(frontier, tmp_path / "f.json")
    assert json.loads(path.read_text())["plan_matrix"]["dtype"] == "uint16"
    assert read_frontier_json(path) == frontier


def _data(d: dict) -> bytes:
    return zlib.decompress(base64.b64decode(d["plan_matrix"]["data"]))


def _set_data(d: dict, raw: bytes) -> None:
    d["plan_matrix"]["data"] = base64.b64encode(raw).decode()


def _other_frequency(d: dict) -> None:
    step = next(p for p in d["points"] if "plan" in p)["plan"][0][0]
    step[2] = next(f for f in d["plan_matrix"]["frequencies_mhz"] if f != step[2])


BAD_MATRIX = [
    ("truncated", lambda d: d["plan_matrix"].update(data=d["plan_matrix"]["data"][:40]), "truncated"),
    ("not-base64", lambda d: d["plan_matrix"].update(data="@@@@" + d["plan_matrix"]["data"]), "corrupted"),
    ("not-zlib", lambda d: _set_data(d, b"not a zlib stream"), "corrupted"),
    ("too-short", lambda d: _set_data(d, zlib.compress(_data(d)[:-3])), "truncated"),
    ("too-long", lambda d: _set_data(d, zlib.compress(_data(d) + b"\0")), "holds more than its shape"),
    ("trailing-bytes", lambda d: _set_data(d, zlib.compress(_data(d)) + b"junk"), "holds more than its shape"),
    ("index-out-of-range", lambda d: _set_data(d, zlib.compress(b"\xff" + _data(d)[1:])), "indexes frequency"),
    ("encoding", lambda d: d["plan_matrix"].update(encoding="lzma"), "encoding must be 'delta-zlib-base64'"),
    ("dtype", lambda d: d["plan_matrix"].update(dtype="int64"), "dtype must be uint8 or uint16"),
    ("dtype-a-list", lambda d: d["plan_matrix"].update(dtype=["uint8"]), "dtype must be uint8 or uint16"),
    ("shape", lambda d: d["plan_matrix"].update(shape=[1, 2]), r"shape must be \[points, 2 x stages x micro"),
    ("frequencies", lambda d: d["plan_matrix"].update(frequencies_mhz=[1410, 810]), "frequencies_mhz must be"),
    ("not-an-object", lambda d: d.update(plan_matrix="fast"), "plan_matrix must be an object"),
    ("disagrees-with-a-plan", _other_frequency, r"points\[\d+\]\.plan is not row \d+ of plan_matrix"),
]


@pytest.mark.parametrize("edit, message", [case[1:] for case in BAD_MATRIX], ids=[case[0] for case in BAD_MATRIX])
def test_a_bad_plan_matrix_names_the_field_and_the_fix(solved, tmp_path, edit, message):
    with pytest.raises(UsageError, match=message) as error:
        read_frontier_json(written(solved[0], tmp_path / "f.json", edit))
    assert "plan_matrix" in str(error.value) and "recompute the file with wattwise frontier" in str(error.value)


def test_a_bad_plan_matrix_is_one_line_and_exit_2_from_the_cli(tmp_path, capsys):
    write_profile(synthetic_profile(2, 3, UNIT_S, seed=3), tmp_path / "profile.csv")
    assert (
        main(
            [
                "frontier",
                str(tmp_path / "profile.csv"),
                "--microbatches",
                "4",
                "--unit-time",
                str(UNIT_S),
                "--p-blocking",
                "80",
                "--out",
                str(tmp_path / "f.json"),
                "--quiet",
            ]
        )
        == 0
    )
    data = json.loads((tmp_path / "f.json").read_text())
    data["plan_matrix"]["data"] = data["plan_matrix"]["data"][:8]
    (tmp_path / "f.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["plan", str(tmp_path / "f.json"), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plan_matrix.data is truncated" in err and "Traceback" not in err


def test_a_decompression_bomb_inflates_no_further_than_its_shape(solved, tmp_path):
    bomb = zlib.compress(bytes(64 * 2**20), 9)  # 64 MiB of zeros in 64 KB
    path = written(solved[0], tmp_path / "f.json", lambda d: _set_data(d, bomb))
    with pytest.raises(UsageError, match=r"plan_matrix\.data holds more than its shape"):
        read_frontier_json(path)


def test_a_huge_plan_matrix_is_refused_before_it_is_inflated(solved, tmp_path):
    def huge(d: dict) -> None:  # 10^9 microbatches, no spelled-out plan to contradict it
        for point in d["points"]:
            point.pop("plan", None)
        d["microbatches"] = 10**9
        d["plan_matrix"]["shape"] = [len(d["points"]), 2 * d["stages"] * 10**9]

    with pytest.raises(UsageError, match=f"more than the {MAX_PLAN_MATRIX_BYTES} bytes allowed"):
        read_frontier_json(written(solved[0], tmp_path / "f.json", huge))
