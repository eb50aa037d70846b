"""Plans a GPU can follow: a profile's clock-change latency, frequency segments, and the frontier built on them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.pipeline import problem_for, synthetic_profile
from wattwise.cli.main import main
from wattwise.errors import UsageError
from wattwise.pipeline.files import read_frontier_json
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import assemble_frontier, choose_intrinsic
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import PipelineProfile, load_profile, write_profile
from wattwise.pipeline.segments import MIN_SEGMENT_CHANGES, followable

UNIT_S = 0.001


def with_latency(profile: PipelineProfile, latency_s: float) -> PipelineProfile:
    return dataclasses.replace(profile, clock_change_s=dict.fromkeys(range(profile.num_stages), latency_s))


def segments_of(problem: PlanningProblem, choice: np.ndarray, stage: int) -> list[tuple[int, float]]:
    """(frequency, seconds) of each run of one frequency in the stage's execution order, as a cycle."""
    runs: list[list[float]] = []
    for node in problem.dag.stage_nodes(stage):
        mhz, took = int(problem.option_frequency_mhz[choice[node]]), float(problem.option_time_s[choice[node]])
        if runs and runs[-1][0] == mhz:
            runs[-1][1] += took
        else:
            runs.append([mhz, took])
    if len(runs) > 1 and runs[0][0] == runs[-1][0]:
        runs[0][1] += runs.pop()[1]
    return [(int(m), t) for m, t in runs]


def alternating_choice(problem: PlanningProblem) -> np.ndarray:
    """Every other instruction at the lowest profiled clock, the rest at the highest: a switch per instruction."""
    choice = problem.max_frequency_choice()
    for stage in range(problem.dag.num_stages):
        for k, node in enumerate(problem.dag.stage_nodes(stage)):
            if k % 2:
                kind = int(problem.node_type[node])
                choice[node] = int(problem.type_offsets[kind + 1]) - 1
    return choice


def test_a_profile_keeps_each_stages_clock_change_latency_through_its_csv(tmp_path: Path) -> None:
    profile = with_latency(synthetic_profile(2, 4, UNIT_S, seed=1), 0.025)
    write_profile(profile, tmp_path / "p.csv")
    assert tmp_path.joinpath("p.csv").read_text().splitlines()[0].endswith(",clock_change_s")
    assert load_profile(tmp_path / "p.csv").clock_change_s == {0: 0.025, 1: 0.025}
    plain = synthetic_profile(2, 4, UNIT_S, seed=1)
    write_profile(plain, tmp_path / "plain.csv")  # a Perseus-format file stays one
    assert tmp_path.joinpath("plain.csv").read_text().splitlines()[0] == "stage,instruction,frequency,time,energy"
    assert load_profile(tmp_path / "plain.csv").clock_change_of(0) == 0.0


def test_a_bad_latency_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(
        "stage,instruction,frequency,time,energy,clock_change_s\n"
        "0,forward,1410,0.1,10,0.02\n0,forward,810,0.2,12,-1\n"
        "0,backward,1410,0.2,20,0.02\n0,backward,810,0.4,24,0.02\n"
    )
    with pytest.raises(UsageError, match=r"line 3: clock_change_s must be between 0 and 10 seconds"):
        load_profile(path)


def test_no_segment_is_shorter_than_the_gpu_can_follow_and_no_instruction_gets_slower() -> None:
    profile = synthetic_profile(2, 4, UNIT_S, seed=3)
    latency_s = 0.2  # instructions last 0.08-0.24 s at the highest clock
    problem = problem_for(with_latency(profile, latency_s), "1f1b", 4, 60.0)
    choice = alternating_choice(problem)
    followed = followable(problem, choice)
    for stage in range(2):
        segments = segments_of(problem, followed, stage)
        assert len(segments) < len(segments_of(problem, choice, stage))
        if len(segments) > 1:
            assert min(t for _, t in segments) >= MIN_SEGMENT_CHANGES * latency_s
        assert (problem.option_frequency_mhz[followed] >= problem.option_frequency_mhz[choice]).all()
    time_before, _ = problem.evaluate(choice)
    time_after, _ = problem.evaluate(followed)
    assert float(time_after) <= float(time_before) + 1e-12


def test_a_gpu_that_switches_fast_keeps_every_switch_and_a_slow_one_merges_them() -> None:
    profile = synthetic_profile(1, 4, UNIT_S, seed=5)
    # Alternating clocks around 0.1-0.3 s instructions: with a 1 ms latency each switch costs little and
    # keeping the slow ones saves more than it; with 100 ms they cost more than they save, or are too short.
    cheap = problem_for(with_latency(profile, 0.001), "gpipe", 4, 60.0)
    choice = alternating_choice(cheap)
    assert segments_of(cheap, followable(cheap, choice), 0) == segments_of(cheap, choice, 0)
    dear = problem_for(with_latency(profile, 0.1), "gpipe", 4, 60.0)
    assert len(segments_of(dear, followable(dear, choice), 0)) < len(segments_of(dear, choice, 0))


def test_without_a_latency_the_plan_is_left_as_it_is() -> None:
    problem = problem_for(synthetic_profile(2, 4, UNIT_S, seed=3), "1f1b", 4, 60.0)
    choice = alternating_choice(problem)
    assert (followable(problem, choice) == choice).all()


def test_the_frontier_holds_only_followable_plans_and_the_plan_file_carries_the_latency(tmp_path: Path) -> None:
    profile = with_latency(synthetic_profile(2, 4, UNIT_S, seed=7), 0.15)
    problem = problem_for(profile, "1f1b", 4, 60.0)
    solver = FrontierSolver(problem, UNIT_S)
    frontier = assemble_frontier(problem, list(solver.run()), unit_time_s=UNIT_S, solver="fast", plans="all")
    assert frontier.clock_change_s == (0.15, 0.15)
    for k in range(len(frontier.points)):
        plan = frontier.with_plan(k).plan
        assert plan is not None
        for stage, steps in enumerate(plan):
            runs: list[list[float]] = []
            for step in steps:
                took = next(
                    o.time_s for o in profile.options(stage, step.instruction) if o.frequency_mhz == step.frequency_mhz
                )
                if runs and runs[-1][0] == step.frequency_mhz:
                    runs[-1][1] += took
                else:
                    runs.append([step.frequency_mhz, took])
            if len(runs) > 1 and runs[0][0] == runs[-1][0]:  # an iteration's end runs on into the next's start
                runs[0][1] += runs.pop()[1]
            assert len(runs) == 1 or min(t for _, t in runs) >= MIN_SEGMENT_CHANGES * 0.15
    write_profile(profile, tmp_path / "p.csv")
    assert main(["frontier", str(tmp_path / "p.csv"), "--microbatches", "4", "--unit-time", "0.001",
                 "--p-blocking", "60", "--out", str(tmp_path / "f.json"), "--quiet"]) == 0  # fmt: skip
    assert read_frontier_json(tmp_path / "f.json").clock_change_s == (0.15, 0.15)
    assert main(["plan", str(tmp_path / "f.json"), "--out", str(tmp_path / "plan.json")]) == 0
    document = json.loads((tmp_path / "plan.json").read_text())
    assert document["clock_change_s"] == [0.15, 0.15]
    chosen = choose_intrinsic(read_frontier_json(tmp_path / "f.json"))
    assert chosen.slowdown <= 1e-9


def test_the_frontier_plot_shows_the_measured_points_beside_the_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyplot = pytest.importorskip("matplotlib.pyplot")
    from wattwise.pipeline.plot import plot_frontier

    profile = synthetic_profile(2, 4, UNIT_S, seed=7)
    problem = problem_for(profile, "1f1b", 4, 60.0)
    frontier = assemble_frontier(
        problem, list(FrontierSolver(problem, UNIT_S).run()), unit_time_s=UNIT_S, solver="fast"
    )
    drawn = []
    monkeypatch.setattr(pyplot, "close", drawn.append)
    measured = [("no-slowdown plan, measured", 1.0, 900.0), ("maximum clock, measured", 0.9, 1000.0)]
    plot_frontier(problem, frontier, tmp_path / "f.png", measured=measured)
    assert (tmp_path / "f.png").stat().st_size > 0
    _, labels = drawn[0].axes[0].get_legend_handles_labels()
    assert {"no-slowdown plan, measured", "maximum clock, measured", "intrinsic choice"} <= set(labels)
