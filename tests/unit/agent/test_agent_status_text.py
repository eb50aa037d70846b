"""`wattwise agent status` in text shows what the JSON shows: each GPU's UUID and allowed range, the jobs."""

from __future__ import annotations

import argparse
import json

import pytest

STATUS = {
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-5c8a3e2f-6b0d-4f1e-9a7c-2d4b8e1f0a63",
            "name": "NVIDIA A100",
            "power_limit_w": 200.0,
            "default_power_limit_w": 400.0,
            "allowed_power_limit_w": [150.0, 350.0],
            "locked_sm_clocks_mhz": None,
            "holder": None,
        }
    ],
    "jobs": [{"job_id": "4711", "uid": 1001, "gpus": [0]}],
    "allocation": "registered",
}


@pytest.mark.parametrize("as_json", [False, True])
def test_status_shows_uuids_bounds_jobs_and_the_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    from wattwise.cli.agent import run_status
    from wattwise.devices.agent import AgentClient

    monkeypatch.setattr(AgentClient, "status", lambda self: STATUS)
    assert run_status(argparse.Namespace(socket="/nonexistent", json=as_json)) == 0
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out) == STATUS
        return
    assert out.splitlines() == [
        "GPU 0 NVIDIA A100 GPU-5c8a3e2f-6b0d-4f1e-9a7c-2d4b8e1f0a63: power limit 200 W (default 400 W, "
        "allowed 150 W-350 W), SM clocks unlocked, free",
        "allocation policy registered; jobs registered: job 4711 of uid 1001: GPU(s) [0]",
    ]
