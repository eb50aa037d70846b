"""The `wattwise` command: what it prints and the exit codes scripts rely on.

Most calls run `main([...])` in-process; a few run the installed console script, as a user would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.support.cli_fixtures import IDLE_W
from wattwise.cli.main import main

SUBPROCESS_TIMEOUT_S = 60.0


pytestmark = pytest.mark.usefixtures("cli_workdir")


def wattwise_script() -> str:
    found = shutil.which("wattwise", path=os.path.dirname(sys.executable)) or shutil.which("wattwise")
    if found is None:
        pytest.skip("the wattwise console script is not installed (pip install -e .)")
    return found


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [wattwise_script(), *args], capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=os.environ.copy()
    )


def test_devices_console_script_on_this_machine(real_auto_backend: None) -> None:
    proc = run_script("devices", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    if any(d["backend"] == "nvml" for d in data["devices"]):
        pytest.skip("this machine has an NVIDIA GPU")
    assert data["simulated"] is False
    assert all(d["backend"] == "rapl" for d in data["devices"])
    notes = " | ".join(data["notes"])
    assert "nvml: unavailable (" in notes
    assert data["notes"][-1].startswith("no NVIDIA GPU found")
    if not data["devices"]:
        assert "rapl: unavailable (" in notes


# -- measure ------------------------------------------------------------------------------------------


def test_measure_reports_the_commands_time_and_the_idle_energy(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["measure", "--json", "--backend", "simulated", "--", sys.executable, "-c", "import time; time.sleep(1)"]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0 and data["simulated"] is True
    assert 0.9 <= data["time_s"] <= 3.0
    assert data["energy_j"]["gpu0"] == pytest.approx(IDLE_W * data["time_s"], rel=0.05)
    assert data["total_energy_j"] == pytest.approx(data["energy_j"]["gpu0"])
    assert data["approximate"] == []


def test_measure_text_output_says_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--backend", "simulated", "--", sys.executable, "-c", "pass"]) == 0
    err = capsys.readouterr().err
    assert "SIMULATED GPU" in err and "gpu0:" in err


def test_measure_passes_the_commands_exit_code_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--backend", "simulated", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_measure_of_a_command_killed_by_a_signal_exits_128_plus_the_signal() -> None:
    script = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert main(["measure", "--backend", "simulated", "--", sys.executable, "-c", script]) == 128 + 15


def test_measure_on_a_bare_machine_runs_the_command_and_tells_only_its_time(
    real_auto_backend: None, bare_machine: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["measure", "--json", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["exit_code"] == 3 and data["time_s"] > 0
    assert data["energy_j"] == {} and data["total_energy_j"] is None and data["simulated"] is False
    assert "wattwise: no NVIDIA GPU found and RAPL unreadable: nothing to measure" in captured.err
    assert main(["measure", "--", sys.executable, "-c", "pass"]) == 0
    err = capsys.readouterr().err
    assert "no energy measured" in err and "SIMULATED" not in err and " J" not in err


def test_measure_console_script_passes_the_exit_code_through() -> None:
    proc = run_script("measure", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "SIMULATED GPU" in proc.stderr or "gpu0:" in proc.stderr


# -- usage errors -------------------------------------------------------------------------------------


def test_console_script_without_sub_command_exits_2() -> None:
    proc = run_script()
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


def test_cap_tells_its_ended_command_without_taking_its_exit_status() -> None:
    from wattwise.cli.cap import _ended

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    try:
        deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
        while not _ended(child.pid):
            assert time.monotonic() < deadline, "the command never ended"
            time.sleep(0.01)
        assert _ended(child.pid)  # asked again: still there to be waited for
    finally:
        code = child.wait(timeout=SUBPROCESS_TIMEOUT_S)
    assert code == 3  # the wrapper still gets the command's exit status
    assert _ended(child.pid)  # reaped now: ended all the same
