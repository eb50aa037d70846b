"""A limit someone else lifted: the agent-backed GPU notes it, the run says so once and in its summary."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.clock import VirtualClock
from wattwise.config import load_config
from wattwise.devices import PowerModel, SimulatedGPU, simulated_gpus
from wattwise.devices.agent import AgentClient, AgentGPU
from wattwise.devices.base import Device
from wattwise.errors import EnergyPluginWarning
from wattwise.run import Run


class _DirectClient(AgentClient):
    """The agent's side reduced to its effect: the limit is set on the shared (simulated) GPU."""

    def __init__(self, gpu: Device) -> None:
        super().__init__("/nonexistent/agent.sock")
        self.gpu = gpu
        self.released: list[int | str] = []
        #: What the agent's status shows as the GPU's holder.
        self.holder: dict[str, Any] | None = None

    def set_power_limit(self, gpu: int | str, watts: float, job: str = "") -> dict[str, Any]:
        self.gpu.set_power_limit_w(watts)
        return {}

    def release(self, gpu: int | str) -> dict[str, Any]:
        self.released.append(gpu)
        return {"released": "restored", "holder": None}

    def hand_over(self, gpu: int | str, pid: int) -> dict[str, Any]:
        self.holder = {"pid": pid}
        return {}

    def status(self) -> dict[str, Any]:
        return {"gpus": [{"index": 0, "uuid": "GPU-x", "holder": self.holder}]}


def test_a_limit_lifted_by_someone_else_is_noted_once_kept_and_said_by_nobody_but_the_run(tmp_path: Path) -> None:
    local = simulated_gpus(1, persist_dir=tmp_path)[0]
    gpu = AgentGPU(local, _DirectClient(local), job="bert", uuid="GPU-x")
    assert gpu.settings_lifted() is None  # nothing set yet
    gpu.set_power_limit_w(200.0)
    assert gpu.settings_lifted() is None and gpu.lifted_note is None
    local.set_power_limit_w(300.0)  # an admin's nvidia-smi -pl, or the agent restoring the GPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = gpu.settings_lifted()
        gpu.release()
        again = gpu.settings_lifted()
    assert first == again == gpu.lifted_note
    assert first is not None and first.startswith("GPU 0: its power limit is 300 W, not the 200 W this job set")
    assert caught == []  # the run (or `wattwise cap`) says it, once
    assert gpu.client.released == ["GPU-x"] and gpu.release_outcome == "restored"  # named by its UUID


def test_the_end_of_a_handed_over_lease_is_no_lift_but_a_change_while_the_command_holds_it_is(tmp_path: Path) -> None:
    local = simulated_gpus(1, persist_dir=tmp_path)[0]
    client = _DirectClient(local)
    gpu = AgentGPU(local, client, uuid="GPU-x")
    gpu.set_power_limit_w(200.0)
    gpu.hand_over(4242)  # `wattwise cap`'s command holds it now
    local.set_power_limit_w(250.0)  # an admin, while the command holds the GPU
    assert gpu.settings_lifted() is not None
    gpu = AgentGPU(local, client, uuid="GPU-x")
    gpu.set_power_limit_w(200.0)
    gpu.hand_over(4242)
    client.holder = None  # the command ended: the agent restored the GPU, as it should
    local.set_power_limit_w(300.0)
    assert gpu.settings_lifted() is None


def test_a_release_right_after_the_runs_own_check_does_not_ask_the_agent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wattwise.devices.agent as agent_module

    local = simulated_gpus(1, persist_dir=tmp_path)[0]
    client = _DirectClient(local)
    asked: list[str] = []
    monkeypatch.setattr(client, "status", lambda: asked.append("status") or _DirectClient.status(client))
    gpu = AgentGPU(local, client, uuid="GPU-x")
    gpu.set_power_limit_w(200.0)
    gpu.hand_over(4242)  # `wattwise cap`'s command holds it: a check asks the agent who holds the GPU
    assert gpu.settings_lifted() is None and asked == ["status"]  # the cap's (or the run's) check at its end
    gpu.release()
    assert asked == ["status"] and client.released == ["GPU-x"]  # not asked twice
    # A release long after the last check (here: any time after it) checks again, and notes a lift.
    monkeypatch.setattr(agent_module, "LIFT_CHECK_FRESH_S", -1.0)
    gpu.set_power_limit_w(200.0)
    gpu.hand_over(4242)
    assert gpu.settings_lifted() is None
    local.set_power_limit_w(300.0)
    gpu.release()
    assert asked == ["status"] * 3 and gpu.lifted_note is not None and "not the 200 W" in gpu.lifted_note


class _LiftedGPU(SimulatedGPU):
    """A GPU whose backend can tell that the limit this run set was lifted (the agent's, reduced to that)."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(0, PowerModel.default(), base_step_time_s=0.1, clock=clock, sleep=clock.sleep)
        self.set_w: float | None = None

    def set_power_limit_w(self, watts: float) -> None:
        super().set_power_limit_w(watts)
        self.set_w = watts

    def settings_lifted(self) -> str | None:
        now_w = self.power_limit_w()
        if self.set_w is None or now_w == self.set_w:
            return None
        return f"GPU 0: its power limit is {now_w:g} W, not the {self.set_w:g} W this job set"


@pytest.mark.parametrize("lifted", [True, False], ids=["lifted", "kept"])
def test_a_run_whose_cap_someone_else_lifted_says_so_once_and_in_its_summary(
    lifted: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    clock = VirtualClock()
    gpu = _LiftedGPU(clock)
    cfg = load_config(
        overrides=[
            "monitor.sample_power=false",
            "monitor.sync_cuda=false",
            "power_limit.mode=cap",
            "power_limit.cap_w=200",
            f"output_dir={tmp_path / 'run'}",
        ]
    )
    run = Run(cfg, devices=[gpu], wall_clock=clock)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        for step in range(6):
            run.step_begin()
            if lifted and step == 3:
                SimulatedGPU.set_power_limit_w(gpu, 300.0)  # an admin's nvidia-smi -pl, behind the run's back
            run.step_end()
        run.finish()
    said = [
        str(w.message)
        for w in caught
        if issubclass(w.category, EnergyPluginWarning) and "not the 200 W" in str(w.message)
    ]
    notes = json.loads((tmp_path / "run" / "summary.json").read_text())["notes"]
    expected = ["GPU 0: its power limit is 300 W, not the 200 W this job set"] if lifted else []
    assert [n for n in notes if "not the 200 W" in n] == expected
    assert [s.removeprefix("wattwise: ") for s in said] == expected
