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


@pytest.mark.parametrize(
    ("gpus", "said"),
    [
        ("5", "wattwise cap: error: --gpus: no GPU 5 on this node (its simulated GPU(s): 0)"),
        ("0,12345678901234567890", "wattwise cap: error: --gpus must list GPU indices from 0 to 65535 (got "),
    ],
)
def test_cap_on_a_gpu_the_simulated_node_lacks_exits_2_naming_its_gpus_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], gpus: str, said: str
) -> None:
    from wattwise.cli.main import main

    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    assert main(["cap", "--backend", "simulated", "--gpus", gpus, "--watts", "200", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.rglob("gpu*.json"))  # no state file for a GPU that is not there


def test_ctrl_c_while_cap_loads_its_modules_exits_130_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from wattwise.cli import main as cli

    def interrupted(load: object = ()) -> None:
        raise KeyboardInterrupt  # as when Ctrl-C lands while `wattwise cap` imports its devices

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["cap", "--watts", "200", "--", "true"]) == 130
