"""What `wattwise cap` says happened to each GPU's limit at its end, from what the node agent answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.cli.cap import FAILED, HELD, RESTORED, RESTORED_BY_AGENT, restore_outcome
from wattwise.devices import simulated_gpus
from wattwise.devices.agent import AgentClient, AgentGPU


@pytest.mark.parametrize(
    ("released", "holder", "outcome", "said"),
    [
        ("restored", None, RESTORED, "limit restored"),
        ("not held", None, RESTORED_BY_AGENT, "limit restored by the node agent when the command ended"),
        (
            "kept",
            {"pid": 4242, "pgid": 4242},
            HELD,
            "outlived it and hold the GPU; the node agent restores it when "
            "the last of them ends (`kill -- -4242` ends them now)",
        ),
        ("failed", {"pid": 4242, "pgid": 4242}, FAILED, "not restored"),
        (None, None, FAILED, "not restored"),  # the agent did not answer
    ],
)
def test_cap_says_who_restored_each_limit_or_who_still_holds_it(
    released: str | None, holder: dict | None, outcome: str, said: str, tmp_path: Path
) -> None:
    gpu = AgentGPU(simulated_gpus(1, persist_dir=tmp_path)[0], AgentClient("/nonexistent.sock"))
    gpu.release_outcome, gpu.holder_after_release = released, holder
    result = restore_outcome(gpu)
    assert (result["gpu"], result["outcome"], result["pgid"]) == (0, outcome, 4242 if outcome == HELD else None)
    assert said in result["message"]


def test_a_gpu_this_process_restores_itself_is_restored(tmp_path: Path) -> None:
    (gpu,) = simulated_gpus(1, persist_dir=tmp_path)
    assert restore_outcome(gpu)["outcome"] == RESTORED
