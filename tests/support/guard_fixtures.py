"""The settings guard's tests, in both tiers: a simulated GPU whose settings persist in a state file, what
the next process would find on it, the guard's journals, and a child process that holds a changed limit.

The fixtures (`state_file`, `child`) reach the tests through the conftest.py of the folders that use
them; every test of the guard also asks for the root conftest's `simulated_home`.
"""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wattwise.config import load_config
from wattwise.devices.simulated import SimulatedGPU
from wattwise.run import Run
from wattwise.safe_files import state_dir
from wattwise.settings.journal import journal_dir
from wattwise.tools.workload import emulate_step

#: The built-in simulated GPU model's maximum (and default) power limit.
MAX_W = 300.0
#: How long a child process may take to start, set its limit, or die after a signal.
CHILD_TIMEOUT_S = 120.0

#: A process that sets GPU 0's power limit through its guard (signal handlers installed) and holds it until
#: signalled. argv: the simulated GPU's state file, the limit in W. Prints "limit set" once it is set.
LIMIT_HOLDER = """
import signal, sys, time
from wattwise.config import load_config
from wattwise.devices.simulated import SimulatedGPU
from wattwise.settings.guard import SettingsGuard

# As an interactive Python has it, even when the test runner was started with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
gpu = SimulatedGPU(0, state_file=sys.argv[1])
guard = SettingsGuard()
guard.install_signal_handlers()
guard.set_power_limit(gpu, float(sys.argv[2]))
print("limit set", flush=True)
while True:
    time.sleep(0.05)
"""

#: Starts a `LIMIT_HOLDER` for a limit in W (150 W unless told) and returns it once the limit is set.
StartHolder = Callable[..., "subprocess.Popen[str]"]


def limit_on_gpu(state_file: Path) -> float:
    """The power limit the next process finds on the simulated GPU whose settings are in `state_file`."""
    return SimulatedGPU(0, state_file=state_file).power_limit_w()


def journals() -> list[Path]:
    """The guard's journals left in this test's state dir (changes still to restore), by name."""
    folder = journal_dir()
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


@pytest.fixture
def state_file(simulated_home: Path) -> Path:
    """Where simulated GPU 0 keeps its settings: inside the state dir, the only place a journal may name."""
    return state_dir() / "simulated" / "gpu0.json"


@pytest.fixture
def child(state_file: Path) -> Iterator[StartHolder]:
    """Start a `LIMIT_HOLDER` on `state_file`; each is killed at the end of the test if still alive."""
    procs: list[subprocess.Popen[str]] = []

    def start(limit_w: float = 150.0) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", LIMIT_HOLDER, str(state_file), str(limit_w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], CHILD_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if line.strip() != "limit set":
            proc.kill()
            _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
            pytest.fail(f"child did not set the limit: {line!r}\n{err}")
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=CHILD_TIMEOUT_S)


def short_tuning_run(state_file: Path, output_dir: Path) -> tuple[Run, SimulatedGPU]:
    """A tuning run (not started) on simulated GPU 0 of `state_file`: no wait, one warm-up and one profiled
    step per limit, 1 ms steps, its record written to `output_dir`."""
    gpu = SimulatedGPU(0, state_file=state_file, base_step_time_s=0.001)
    cfg = load_config(
        overrides=[
            "power_limit.mode=tune",
            "power_limit.wait_steps=0",
            f"output_dir={output_dir}",
            "power_limit.warmup_steps=1",
            "power_limit.profile_steps=1",
        ]
    )
    return Run(cfg, devices=[gpu]), gpu


def train_steps(run: Run, gpu: SimulatedGPU, steps: int) -> None:
    """`steps` emulated training steps of `run` on `gpu`."""
    for _ in range(steps):
        run.step_begin()
        emulate_step([gpu], lambda: None)
        run.step_end()
