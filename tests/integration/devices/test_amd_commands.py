"""The amdsmi backend's paths that start processes, on the fake amdsmi binding: `wattwise devices --backend
amdsmi` as a command, `wattwise cap` running a command under an AMD cap, and the restore of a dead process's
AMD cap from its journal (the in-process paths: tests/unit/devices/test_amd_paths.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import wattwise.devices.amdsmi as backend
from tests.support.fake_amdsmi import FakeAmdSmi, forget_process_state, mi300
from wattwise.cli.main import main
from wattwise.devices import discover
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, real_auto_backend: None) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    forget_process_state(monkeypatch)


def test_devices_backend_amdsmi_without_the_library_is_one_line_and_exits_non_zero() -> None:
    if importlib.util.find_spec("amdsmi") is not None:
        pytest.skip("the amdsmi package is installed here")
    proc = subprocess.run(
        [sys.executable, "-m", "wattwise", "devices", "--backend", "amdsmi"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ROCM_PATH": "/opt/rocm-7.0.2"},
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    # The binding must match the ROCm release: the hint installs the one that ROCm (at $ROCM_PATH) ships.
    assert "pip install /opt/rocm-7.0.2/share/amd_smi" in line and "Traceback" not in proc.stderr


def test_cap_caps_the_amd_gpu_for_the_command_and_restores_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu]).install(monkeypatch)
    caps_w: list[float] = []
    real_set = backend.AmdsmiGPU.set_power_limit_w

    def spy(self: backend.AmdsmiGPU, watts: float) -> None:
        real_set(self, watts)
        caps_w.append(fake_gpu.cap_uw / 1e6)

    monkeypatch.setattr(backend.AmdsmiGPU, "set_power_limit_w", spy)
    assert main(["cap", "--backend", "amdsmi", "--watts", "350", "--", sys.executable, "-c", "pass"]) == 0
    assert caps_w == [350.0, 500.0]  # capped for the command, then restored
    assert "350 W on GPU(s) [0]" in capsys.readouterr().err


def test_a_dead_processs_amd_cap_is_restored_from_its_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = mi300()
    FakeAmdSmi([fake_gpu]).install(monkeypatch)
    (gpu,) = discover("amdsmi").gpus
    gpu.set_power_limit_w(320.0)  # what a process killed with SIGKILL left behind
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, timeout=120, check=True
    )
    path = journal_dir() / "dead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "pid": int(dead.stdout),
                "host": socket.gethostname(),
                "created": 0.0,
                "changes": [{"device": gpu.spec(), "setting": "power_limit_w", "original": 500.0}],
            }
        )
    )
    result = recover_stale_journals()
    assert len(result.restored) == 1 and result.failed == []
    assert fake_gpu.cap_uw == 500_000_000
    assert not path.exists()
