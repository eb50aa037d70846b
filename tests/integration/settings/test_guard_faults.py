"""The guard under faults: two processes on one GPU, a SIGKILLed run's leftover, a recycled pid, a full
disk, corrupted or foreign journals, and the demo stopped by a signal.

Crash paths run real child processes on a simulated GPU whose settings persist in a state file inside the
state dir (as a real GPU keeps them after the process dies); the test process is the second process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.support.guard_fixtures import CHILD_TIMEOUT_S, MAX_W, journals, limit_on_gpu, short_tuning_run, train_steps
from wattwise.cli.main import main
from wattwise.devices.simulated import SimulatedGPU
from wattwise.run import EnergyPluginWarning
from wattwise.settings.guard import DeviceBusyError, JournalError, SettingsGuard
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals
from wattwise.tools.demo import demo_folder, private_state_dir

WATTWISE = Path(sys.executable).parent / "wattwise"

pytestmark = pytest.mark.usefixtures("simulated_home")


def killed(child: Any, limit_w: float) -> int:
    proc = child(limit_w)
    proc.kill()
    proc.wait(timeout=CHILD_TIMEOUT_S)
    return int(proc.pid)


# -- 1. one holder per GPU ------------------------------------------------------------------------------


def test_a_second_process_refuses_a_gpu_another_live_process_holds(child: Any, state_file: Path) -> None:
    holder = child(150.0)
    gpu = SimulatedGPU(0, state_file=state_file)
    guard = SettingsGuard()
    with pytest.raises(DeviceBusyError, match=f"GPU gpu0 is held by wattwise process PID {holder.pid}"):
        guard.set_power_limit(gpu, 200.0)
    assert not guard.changed  # the holder's 150 W was never recorded as an original
    assert limit_on_gpu(state_file) == 150.0
    assert [json.loads(p.read_text())["pid"] for p in journals()] == [holder.pid]
    guard.close()
    holder.send_signal(signal.SIGTERM)
    holder.wait(timeout=CHILD_TIMEOUT_S)
    assert limit_on_gpu(state_file) == MAX_W  # the holder restored the true original
    assert journals() == []
    with SettingsGuard() as free:  # the GPU is free again once its holder is gone
        free.set_power_limit(gpu, 200.0)
    assert limit_on_gpu(state_file) == MAX_W


def test_a_tuning_run_on_a_held_gpu_warns_once_and_only_measures(child: Any, state_file: Path, tmp_path: Path) -> None:
    holder = child(150.0)
    run, gpu = short_tuning_run(state_file, tmp_path / "r")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.start()
        train_steps(run, gpu, 5)
        run.finish()
    messages = [str(w.message) for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert len(messages) == 1
    assert f"GPU gpu0 is held by wattwise process PID {holder.pid}" in messages[0]
    assert "measurement only" in messages[0]
    assert limit_on_gpu(state_file) == 150.0  # left to its holder
    holder.send_signal(signal.SIGTERM)
    holder.wait(timeout=CHILD_TIMEOUT_S)
    assert limit_on_gpu(state_file) == MAX_W


# -- 2. a SIGKILLed run's leftover is recovered before anything reads the GPU ---------------------------


def test_the_next_run_recovers_a_killed_runs_limit_before_recording_the_original(child: Any, state_file: Path) -> None:
    gpu = SimulatedGPU(0, state_file=state_file)  # this process looked at the GPU first
    killed(child, 275.0)
    assert gpu.power_limit_w() == 275.0  # the leftover, as a real GPU shows it
    guard = SettingsGuard()  # recovers first
    assert gpu.power_limit_w() == MAX_W
    guard.set_power_limit(gpu, 200.0)
    (journal,) = journals()
    assert json.loads(journal.read_text())["changes"][0]["original"] == MAX_W
    guard.close()
    assert limit_on_gpu(state_file) == MAX_W


def test_devices_shows_a_leftover_without_restoring_it(
    child: Any, state_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = killed(child, 275.0)
    assert main(["devices", "--backend", "simulated"]) == 0
    out = capsys.readouterr().out
    assert (
        f"leftover: simulated gpu0 power limit 275 W from dead process PID {pid}, original power limit "
        "300 W; run `wattwise restore`"
    ) in out
    assert limit_on_gpu(state_file) == 275.0  # listing changes nothing
    assert main(["restore"]) == 0
    capsys.readouterr()
    assert main(["devices", "--backend", "simulated"]) == 0
    assert "leftover" not in capsys.readouterr().out


# -- 3. owners are found by their lock, not their pid ---------------------------------------------------


def test_a_dead_runs_journal_is_recovered_even_when_its_pid_now_belongs_to_a_live_process(
    child: Any, state_file: Path
) -> None:
    killed(child, 150.0)
    (path,) = journals()
    journal = json.loads(path.read_text())
    journal["pid"] = os.getppid()  # the pid was reused by an unrelated live process
    path.write_text(json.dumps(journal))
    result = recover_stale_journals()
    assert result.failed == [] and len(result.restored) == 1
    assert limit_on_gpu(state_file) == MAX_W
    assert journals() == []


# -- 4. a full disk -------------------------------------------------------------------------------------


def test_a_folder_others_can_write_is_refused(state_file: Path, child: Any) -> None:
    killed(child, 150.0)
    journal_dir().chmod(0o777)
    result = recover_stale_journals()
    assert result.restored == []
    assert len(result.failed) == 1 and "writable by group or others (mode 0o777)" in result.failed[0]
    assert limit_on_gpu(state_file) == 150.0
    with SettingsGuard(recover=False) as guard, pytest.raises(JournalError, match="writable by group or others"):
        guard.set_power_limit(SimulatedGPU(0, state_file=state_file), 200.0)
    assert limit_on_gpu(state_file) == 150.0


DEMO_ARGS = [
    "demo",
    "--wait-steps",
    "0",
    "--warmup-steps",
    "1",
    "--profile-steps",
    "1",
    "--step-w",
    "100",
    "--base-step-time",
    "0.01",
    "--steps-after-tuning",
    "300",
]


def start_demo(tmp_path: Path, framework: str = "lightning") -> subprocess.Popen[str]:
    """The demo (Lightning's, the default, or Accelerate's: both end through the same guard)."""
    return subprocess.Popen(
        [str(WATTWISE), *DEMO_ARGS, "--framework", framework, "--output-dir", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def wait_for(predicate: Any, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
            pytest.fail(f"the demo ended (or hung) first: {proc.returncode}\n{out}\n{err}")
        time.sleep(0.05)


def demo_dirs() -> list[Path]:
    return [p for p in demo_folder().iterdir() if p.is_dir()] if demo_folder().is_dir() else []


def test_sigterm_during_the_baseline_exits_143_says_so_and_leaves_nothing(tmp_path: Path) -> None:
    proc = start_demo(tmp_path)
    wait_for(lambda: (tmp_path / "out" / "summary.json").exists(), proc)  # the tuned run is over
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "restored" in err
    assert demo_dirs() == [] and list(demo_folder().glob("*.lock")) == []
    assert journals() == []


def test_sigint_during_tuning_exits_130_and_leaves_nothing(tmp_path: Path) -> None:
    proc = start_demo(tmp_path, "accelerate")
    wait_for(lambda: bool(journals()), proc)  # tuning changed the limit
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err
    assert demo_dirs() == [] and journals() == []


def test_a_killed_demos_leftover_is_cleaned_by_the_next_one(tmp_path: Path) -> None:
    proc = start_demo(tmp_path, "accelerate")
    wait_for(lambda: bool(journals()), proc)
    proc.kill()
    proc.communicate(timeout=CHILD_TIMEOUT_S)
    (left,) = demo_dirs()
    assert journals()
    with private_state_dir() as mine:
        assert demo_dirs() == [mine]
    assert not left.exists() and demo_dirs() == [] and journals() == []
