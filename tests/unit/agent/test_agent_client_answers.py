"""The agent client checks each answer before it hands it on: a field of another type is one `DeviceError`."""

from __future__ import annotations

import json

import pytest

import wattwise.devices.agent
from wattwise.devices.agent import AgentClient
from wattwise.devices.base import DeviceError


class _Answer:
    def __init__(self, body: object, status: int = 200) -> None:
        self.status, self._raw = status, json.dumps(body).encode()

    def read(self) -> bytes:
        return self._raw


def _answering(monkeypatch: pytest.MonkeyPatch, body: object, status: int = 200) -> AgentClient:
    """A client whose every call gets `body` back, as if the agent had sent it."""

    class Connection:
        def __init__(self, path: str, timeout: float) -> None:
            pass

        def request(self, method: str, url: str, body: bytes | None = None, headers: object = None) -> None:
            pass

        def getresponse(self) -> _Answer:
            return _Answer(answer, status)

        def close(self) -> None:
            pass

    answer = body
    monkeypatch.setattr(wattwise.devices.agent, "_UnixConnection", Connection)
    return AgentClient("/run/test/agent.sock")


GPU = {
    "index": 0,
    "uuid": "GPU-1",
    "name": "H100",
    "power_limit_w": 250.0,
    "default_power_limit_w": 300.0,
    "allowed_power_limit_w": [100.0, 300.0],
    "locked_sm_clocks_mhz": None,
    "holder": {"pid": 42, "uid": 1000, "job": "bert", "job_id": "", "pgid": None},
}


def test_a_well_formed_answer_is_handed_on_as_the_agent_sent_it(monkeypatch: pytest.MonkeyPatch) -> None:
    status = {"gpus": [GPU], "jobs": [], "allocation": "none", "later_field": {"any": "shape"}}
    assert _answering(monkeypatch, status).status() == status
    assert _answering(monkeypatch, {**GPU, "released": "kept"}).release(0)["released"] == "kept"


@pytest.mark.parametrize(
    ("call", "answer", "named"),
    [
        ("status", {"gpus": [{**GPU, "index": "0"}]}, r"gpus\[0\]\.index must be a whole number >= 0 \(got '0'\)"),
        ("status", {"gpus": [{**GPU, "holder": {"pid": "42"}}]}, r"gpus\[0\]\.holder\.pid must be a whole number"),
        ("status", {"gpus": {"index": 0}}, r"gpus must be a list"),
        ("devices", {"backend": "nvml", "devices": [{"backend": "nvml"}]}, r"key 'devices\[0\]\.index' is missing"),
        ("release", {**GPU, "released": "gone"}, r"released must be one of restored, kept, not held, failed"),
        ("release", [GPU], r"is not a JSON object"),
    ],
)
def test_an_answer_of_another_shape_is_a_device_error_naming_its_field(
    monkeypatch: pytest.MonkeyPatch, call: str, answer: object, named: str
) -> None:
    client = _answering(monkeypatch, answer)
    with pytest.raises(DeviceError, match=named) as caught:
        getattr(client, call)(*(() if call in ("status", "devices") else (0,)))
    message = str(caught.value)
    assert message.startswith("wattwise agent at /run/test/agent.sock: the answer to /v1/")
    assert "run directory" not in message and "\n" not in message
