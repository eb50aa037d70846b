"""The protocol of processes that agree and end apart (`wattwise.run.agreement`), seen from the main process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.two_processes import TwoProcesses
from wattwise.distributed import Collective
from wattwise.run.agreement import (
    FIGURES_LEFT,
    Ended,
    RankEnd,
    agree,
    agree_opening,
    collect_rank_ends,
    combine_telling,
    leave_rank_end,
    parse_rank_end,
)
from wattwise.vocabulary import EndedHow


def rank_end(rank: int) -> RankEnd:
    return RankEnd(
        energy={f"rank{rank}/gpu0": 12.5},
        cpu=None,
        time_s=3.0,
        devices=[{"name": "Simulated", "rank": rank}],
        paused={"validation": [0.5, 2.0, 1]},
        samples=[(1700000000.0, {f"rank{rank}/gpu0": 250.0})],
        lost=None,
        rank=rank,
        timeline=[[1700000000.0, f"rank{rank}/gpu0", "power_limit_w", 200.0]],
        lifted=[],
        ended=Ended(how=EndedHow.SIGNALLED, detail="SIGTERM"),
    )


def test_a_single_process_agrees_alone_without_a_collective() -> None:
    class NoCollective(Collective):
        def all_gather(self, obj: object) -> list[object]:
            raise AssertionError("a collective in a single process")

    agreement = agree(NoCollective(), "its GPU is held by another job")
    assert agreement.failed and agreement.everyone and agreement.note() == "rank 0: its GPU is held by another job"
    assert not agree(NoCollective(), None).failed


def test_every_process_learns_which_ranks_failed_and_why_in_one_collective() -> None:
    two = TwoProcesses(fails_at=0)
    agreement = agree(two, None)
    assert two.asked == [0]  # one exchange
    assert agreement.ranks == [1] and not agreement.everyone
    assert agreement.note() == "rank 1: setting the power limit to 200 W failed (gpu1: the GPU has fallen off the bus)"
    assert agreement.note(leaving_out=[1]) == ""


def test_a_process_with_nothing_to_measure_learns_that_the_figures_it_logs_are_simulated() -> None:
    # Rank 1 found no GPU; rank 0's is simulated. Both must mark the combined figures simulated, or they log
    # different metrics and Lightning's sync_dist reduces one more on rank 0 (the processes hung).
    class RankOne(Collective):
        rank, world_size = 1, 2

        def all_gather(self, obj: object) -> list[object]:
            return [(None, True), obj]

    agreement = agree_opening(RankOne(), "nothing to measure", simulated=False)
    assert agreement.simulated and agreement.ranks == [1]
    assert not agree_opening(Collective(), None, simulated=False).simulated  # one process: its own GPUs say


def test_a_lost_measurement_is_counted_in_the_figures_exchange_not_signalled_by_nan() -> None:
    two = TwoProcesses()
    windows, lost = combine_telling(two, [(1.0, 10.0)], None)
    assert windows == [(1.0, 20.0)] and not lost.failed and two.asked == []  # no second collective
    windows, lost = combine_telling(two, [(1.0, 0.0)], "energy measurement failed (gpu0 lost)")
    assert windows == [(1.0, 0.0)] and lost.ranks == [0] and two.asked == [0]


def test_a_rank_end_left_in_a_file_is_read_back_validated_and_removed(tmp_path: Path) -> None:
    leave_rank_end(tmp_path, rank_end(1))
    left = collect_rank_ends(tmp_path, 2, wait_s=0.0)
    assert left.found == {1: parse_rank_end(json.loads(json.dumps(rank_end(1))), rank=1)} and not left.refused
    assert left.found[1]["samples"] == [(1700000000.0, {"rank1/gpu0": 250.0})]
    assert not (tmp_path / FIGURES_LEFT.format(rank=1)).exists()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"rank": 2}, "rank must be 1 (got 2)"),
        ({"time_s": "3"}, "time_s must be a finite number (got '3')"),
        ({"energy": {"rank1/gpu0": True}}, "energy must map device labels to finite numbers"),
        ({"timeline": [[0.0, "gpu0"]]}, "timeline must be a list of [timestamp_s, device, setting, value]"),
        (
            {"paused": {"validation": [1.0]}},
            "paused must map kinds to [time_s, energy_j, count] (and the squared uncertainty)",
        ),
    ],
)
def test_a_rank_end_that_is_not_one_wattwise_wrote_is_refused_naming_the_field(
    change: dict[str, object], why: str
) -> None:
    with pytest.raises(ValueError) as refused:
        parse_rank_end({**rank_end(1), **change}, rank=1)
    assert str(refused.value) == why


def test_a_planted_link_is_not_followed_and_its_rank_counts_as_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps(rank_end(1)))
    os.symlink(secret, tmp_path / FIGURES_LEFT.format(rank=1))
    leave_rank_end(tmp_path, rank_end(2))
    left = collect_rank_ends(tmp_path, 3, wait_s=0.0)
    assert list(left.found) == [2]
    assert left.refused == {1: "its interrupted-rank1.json is a symbolic link (wattwise never follows one there)"}
    assert (tmp_path / FIGURES_LEFT.format(rank=1)).is_symlink() and secret.exists()
