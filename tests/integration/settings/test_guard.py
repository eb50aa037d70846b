"""The settings guard puts every changed GPU setting back, on every way out of a process.

Crash paths run in a child process that changes a simulated GPU's power limit (persisted in a state file,
as a real GPU keeps it after the process dies) and is then signalled; the state file is what the next
process would find on the GPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_pynvml import FakeGpu, FakeNvml
from tests.support.guard_fixtures import CHILD_TIMEOUT_S, MAX_W, journals, limit_on_gpu
from wattwise.cli.main import main
from wattwise.devices.nvml import nvml_gpus
from wattwise.devices.simulated import SimulatedGPU
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals

pytestmark = pytest.mark.usefixtures("simulated_home")


def dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=True,
    )
    return int(proc.stdout)


# -- in-process exits ---------------------------------------------------------------------------------


def test_sigterm_restores_the_limit_before_the_process_dies(child: Any, state_file: Path) -> None:
    proc = child()
    assert limit_on_gpu(state_file) == 150.0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=CHILD_TIMEOUT_S) == -signal.SIGTERM  # still dies by the signal
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_sigint_restores_the_limit_and_interrupts_the_program(child: Any, state_file: Path) -> None:
    proc = child()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=CHILD_TIMEOUT_S)
    _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert code != 0
    assert "KeyboardInterrupt" in err
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_after_sigkill_the_limit_stays_changed_until_recovery(child: Any, state_file: Path) -> None:
    proc = child()
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=CHILD_TIMEOUT_S) == -signal.SIGKILL
    assert limit_on_gpu(state_file) == 150.0  # what a killed process leaves on a real GPU
    (journal,) = journals()
    recorded = json.loads(journal.read_text())
    assert recorded["pid"] == proc.pid
    assert [(c["setting"], c["original"]) for c in recorded["changes"]] == [("power_limit_w", MAX_W)]

    result = recover_stale_journals()
    assert result.failed == []
    assert len(result.restored) == 1 and "300" in result.restored[0]
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []
    assert recover_stale_journals().restored == []  # nothing left to do


def test_wattwise_restore_puts_back_what_a_killed_process_left(
    child: Any, state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = child(125.0)
    proc.kill()
    proc.wait(timeout=CHILD_TIMEOUT_S)
    assert limit_on_gpu(state_file) == 125.0
    assert main(["restore"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("restored simulated device 0: power_limit_w -> 300")
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_a_new_guard_recovers_what_a_killed_process_left(child: Any, state_file: Path) -> None:
    proc = child()
    proc.kill()
    proc.wait(timeout=CHILD_TIMEOUT_S)
    guard = SettingsGuard()  # recovers on start, as every run does
    guard.close()
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


def test_a_live_process_journal_is_left_alone_even_when_forced(
    child: Any, state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = child()
    result = recover_stale_journals()
    assert result.restored == [] and result.failed == []
    assert len(result.held) == 1 and f"PID {proc.pid}" in result.held[0]
    assert limit_on_gpu(state_file) == 150.0
    assert main(["restore", "--force"]) == 1  # refused, naming the holder: never deleted under it
    out = capsys.readouterr().out
    assert out.startswith("FAILED") and f"PID {proc.pid}" in out and f"kill {proc.pid}" in out
    assert limit_on_gpu(state_file) == 150.0
    assert len(journals()) == 1
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)  # the owner restores its own settings
    proc.wait(timeout=CHILD_TIMEOUT_S)
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


# -- recovery of hand-written journals ----------------------------------------------------------------


def write_journal(name: str, pid: int, changes: list[dict[str, Any]]) -> Path:
    import socket

    path = journal_dir() / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "created": 0.0, "changes": changes}))
    return path


def test_a_journal_whose_restore_fails_is_kept_with_only_what_failed(
    monkeypatch: pytest.MonkeyPatch, state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu = FakeGpu(default_limit_w=400.0)
    FakeNvml([fake_gpu]).install(monkeypatch)
    (nvml_gpu,) = nvml_gpus()
    sim = SimulatedGPU(0, state_file=state_file)
    sim.set_power_limit_w(150.0)
    fake_gpu.limit_mw = 250_000
    path = write_journal(
        "dead.json",
        dead_pid(),
        [
            {"device": sim.spec(), "setting": "power_limit_w", "original": MAX_W},
            {"device": nvml_gpu.spec(), "setting": "power_limit_w", "original": 400.0},
        ],
    )
    fake_gpu.lost = True

    assert main(["restore"]) == 1
    out = capsys.readouterr().out
    assert "restored simulated device 0" in out and "FAILED nvml device 0" in out
    assert limit_on_gpu(state_file) == MAX_W
    kept = json.loads(path.read_text())["changes"]
    assert [c["device"]["backend"] for c in kept] == ["nvml"]

    fake_gpu.lost = False  # the GPU is back: the next attempt finishes the job
    retry = recover_stale_journals()
    assert len(retry.restored) == 1 and retry.failed == []
    assert fake_gpu.limit_mw == 400_000
    assert not path.exists()


def test_a_journal_from_another_host_is_left_alone(state_file: Path) -> None:
    sim = SimulatedGPU(0, state_file=state_file)
    sim.set_power_limit_w(150.0)
    path = journal_dir() / "other.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "pid": dead_pid(),
                "host": "some-other-host-" + os.urandom(4).hex(),
                "created": 0.0,
                "changes": [{"device": sim.spec(), "setting": "power_limit_w", "original": MAX_W}],
            }
        )
    )
    assert recover_stale_journals(include_live=True).restored == []
    assert limit_on_gpu(state_file) == 150.0
    assert path.exists()


def test_a_journal_with_a_malformed_change_is_reported_and_kept(state_file: Path) -> None:
    sim = SimulatedGPU(0, state_file=state_file)
    path = write_journal("partial.json", dead_pid(), [{"device": sim.spec(), "original": MAX_W}])
    result = recover_stale_journals()
    assert len(result.failed) == 1 and "partial.json" in result.failed[0]
    assert path.exists()
