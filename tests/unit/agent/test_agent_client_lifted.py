"""A client of the node agent says once, and keeps for its summary, that its power limit was lifted by another."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from wattwise.devices import simulated_gpus
from wattwise.devices.agent import AgentClient, AgentGPU
from wattwise.devices.base import Device
from wattwise.errors import EnergyPluginWarning


class _DirectClient(AgentClient):
    """The agent's side reduced to its effect: the limit is set on the shared (simulated) GPU."""

    def __init__(self, gpu: Device) -> None:
        super().__init__("/nonexistent/agent.sock")
        self.gpu = gpu

    def set_power_limit(self, index: int, watts: float, job: str = "") -> dict[str, Any]:
        self.gpu.set_power_limit_w(watts)
        return {}


def test_a_limit_lifted_by_someone_else_is_said_once_and_kept_for_the_summary(tmp_path: Path) -> None:
    local = simulated_gpus(1, persist_dir=tmp_path)[0]
    gpu = AgentGPU(local, _DirectClient(local), job="bert")
    assert gpu.settings_lifted() is None  # nothing set yet
    gpu.set_power_limit_w(200.0)
    assert gpu.settings_lifted() is None and gpu.lifted_note is None
    local.set_power_limit_w(300.0)  # an admin's nvidia-smi -pl, or the agent restoring the GPU
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = gpu.settings_lifted()
        again = gpu.settings_lifted()
    assert first == again == gpu.lifted_note
    assert first is not None and first.startswith("GPU 0: its power limit is 300 W, not the 200 W this job set")
    assert [(w.category, str(w.message)) for w in caught] == [(EnergyPluginWarning, first)]


def test_giving_the_gpu_back_says_a_lift_nobody_asked_about_and_nothing_when_the_limit_held(tmp_path: Path) -> None:
    local = simulated_gpus(1, persist_dir=tmp_path)[0]
    released: list[int] = []

    class _Releasing(_DirectClient):
        def release(self, index: int) -> dict[str, Any]:
            released.append(index)
            return {}

    gpu = AgentGPU(local, _Releasing(local))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu.set_power_limit_w(200.0)
        gpu.release()  # the limit held: nothing to say
        gpu.set_power_limit_w(200.0)
        local.set_power_limit_w(250.0)
        gpu.release()
    assert released == [0, 0]
    assert len(caught) == 1
    assert str(caught[0].message).startswith("GPU 0: its power limit is 250 W, not the 200 W this job set")
