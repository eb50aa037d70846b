"""Schedules (1F1B, GPipe) and the DAG built from them: order per stage, edges, longest paths."""

from __future__ import annotations

import numpy as np
import pytest

from wattwise.errors import UsageError
from wattwise.pipeline.dag import build_dag, pipeline_dag
from wattwise.pipeline.schedule import Step, build_schedule, gpipe, one_f_one_b


def labels(schedule):
    return [" ".join(step.label() for step in steps) for steps in schedule]


def test_1f1b_order_per_stage_for_3_stages_and_4_microbatches():
    assert labels(one_f_one_b(3, 4)) == [
        "F0 F1 F2 B0 F3 B1 B2 B3",
        "F0 F1 B0 F2 B1 F3 B2 B3",
        "F0 B0 F1 B1 F2 B2 F3 B3",
    ]


def test_1f1b_with_fewer_microbatches_than_stages_warms_up_with_all_of_them():
    assert labels(one_f_one_b(4, 2)) == ["F0 F1 B0 B1"] * 3 + ["F0 B0 F1 B1"]


def test_gpipe_runs_all_forwards_then_all_backwards():
    assert labels(gpipe(2, 3)) == ["F0 F1 F2 B0 B1 B2"] * 2


@pytest.mark.parametrize("stages, microbatches", [(1, 1), (2, 5), (4, 4), (8, 12)])
def test_1f1b_keeps_at_most_stages_minus_index_activations_alive(stages, microbatches):
    for stage, steps in enumerate(one_f_one_b(stages, microbatches)):
        alive = peak = 0
        for step in steps:
            alive += 1 if step.instruction == "forward" else -1
            peak = max(peak, alive)
        assert peak == min(stages - stage, microbatches)


def test_dag_edges_of_2_stages_2_microbatches_1f1b():
    dag = pipeline_dag("1f1b", 2, 2)
    name = {
        dag.node(s, ins, m): f"{ins[0].upper()}{s}{m}"
        for s in range(2)
        for ins in ("forward", "backward")
        for m in range(2)
    }
    edges = {(name[t], name[h]) for t, h in zip(dag.edge_tails.tolist(), dag.edge_heads.tolist(), strict=True)}
    assert edges == {
        # stage 0 runs F0 F1 B0 B1, stage 1 runs F0 B0 F1 B1
        ("F00", "F01"),
        ("F01", "B00"),
        ("B00", "B01"),
        ("F10", "B10"),
        ("B10", "F11"),
        ("F11", "B11"),
        # activations down, gradients up
        ("F00", "F10"),
        ("F01", "F11"),
        ("B10", "B00"),
        ("B11", "B01"),
    }


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_uniform_pipeline_takes_stages_plus_microbatches_minus_one_slots(schedule):
    stages, microbatches, forward_s, backward_s = 4, 6, 1.0, 2.0
    dag = pipeline_dag(schedule, stages, microbatches)
    durations = np.where(dag.instruction_of == 0, forward_s, backward_s)
    assert float(dag.makespan(durations)) == pytest.approx((stages + microbatches - 1) * (forward_s + backward_s))


def test_batched_longest_paths_equal_one_by_one():
    dag = pipeline_dag("1f1b", 3, 5)
    rng = np.random.default_rng(0)
    batch = rng.uniform(0.5, 2.0, size=(7, dag.num_nodes))
    assert np.allclose(dag.makespan(batch), [float(dag.makespan(row)) for row in batch])


def test_latest_finish_times_leave_the_critical_path_no_slack():
    dag = pipeline_dag("1f1b", 3, 4)
    durations = np.where(dag.instruction_of == 0, 1.0, 2.0)
    finish = dag.finish_times(durations)
    latest = dag.latest_finish_times_by_node(durations[:, None], np.asarray([finish.max()]))[:, 0]
    assert np.all(latest >= finish - 1e-12)
    assert np.isclose(latest, finish).sum() >= stages_plus_microbatches(3, 4)


def stages_plus_microbatches(stages: int, microbatches: int) -> int:
    """A critical path of a uniform pipeline has at least this many instructions."""
    return stages + microbatches - 1


def test_a_schedule_that_deadlocks_is_rejected():
    schedule = [[Step("backward", 0), Step("forward", 0)], [Step("forward", 0), Step("backward", 0)]]
    with pytest.raises(UsageError, match="deadlocks"):
        build_dag(schedule)


def test_a_schedule_missing_an_instruction_is_rejected():
    with pytest.raises(UsageError, match=r"stage 1 .* exactly once"):
        build_dag([[Step("forward", 0), Step("backward", 0)], [Step("forward", 0)]])


def test_unknown_schedule_and_bad_sizes_name_the_field():
    with pytest.raises(UsageError, match="schedule must be one of"):
        build_schedule("zero-bubble", 2, 2)
    with pytest.raises(UsageError, match="microbatches must be a positive integer"):
        build_schedule("1f1b", 2, 0)
