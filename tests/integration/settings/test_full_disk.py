"""A full disk under WATTWISE_HOME during tuning (issue 27): the run exits 0, the simulated GPU is back at its
highest limit and no journal is left, because restoring does not depend on finding a free block.

Needs a small filesystem to fill: a tmpfs, mounted where root may mount one (CI runs as root); skipped
elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Tunes the simulated GPU for 12 steps, fills WATTWISE_HOME's disk, trains 20 more steps and finishes;
#: prints the limit before filling. argv: WATTWISE_HOME (already in the environment), output folder.
TUNE_THEN_FILL = """
import os, sys
from wattwise.config import load_config
from wattwise.run import Run
from wattwise.tools.workload import emulate_step
cfg = load_config(overrides=["devices.backend=simulated", "power_limit.mode=tune", "power_limit.wait_steps=1",
    "power_limit.warmup_steps=1", "power_limit.profile_steps=2", "power_limit.step_w=25",
    "power_limit.stop_after_worse=0",
    "monitor.sample_power=false", "monitor.sync_cuda=false", "devices.simulated.base_step_time_s=0.001",
    f"output_dir={sys.argv[1]}"])
run = Run(cfg)
run.start()
for _ in range(12):
    run.step_begin(); emulate_step(run.gpus, lambda: None); run.step_end()
print(run.gpus[0].power_limit_w())
fd = os.open(os.path.join(os.environ["WATTWISE_HOME"], "filler"), os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, b"x" * 1024)
except OSError:
    pass
os.close(fd)
for _ in range(20):
    run.step_begin(); emulate_step(run.gpus, lambda: None); run.step_end()
run.finish()
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mount)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)


def test_a_full_disk_under_wattwise_home_still_restores_the_gpu(tmp_path: Path, small_disk: Path) -> None:
    home = small_disk / "home"
    home.mkdir()
    # The ideal physics, as every test's process (tests/conftest.py): the realistic one spends about 2 s of
    # counter updates per tuned limit, so 12 short steps would never leave the highest limit to restore from.
    # Every limit is profiled (stop_after_worse=0): 1 ms steps timed on a busy machine's clock could make two
    # limits in a row look slower than the highest, end the sweep and choose it, leaving nothing to restore.
    env = {
        "PATH": "/usr/bin:/bin",
        "WATTWISE_HOME": str(home),
        "PYTHONWARNINGS": "ignore",
        "WATTWISE_SIMULATED_PHYSICS": os.environ["WATTWISE_SIMULATED_PHYSICS"],
    }
    proc = subprocess.run(
        [sys.executable, "-c", TUNE_THEN_FILL, str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split()[0]) < 300.0  # tuning had changed the limit before the disk filled
    assert "could not restore" not in proc.stderr, proc.stderr[-3000:]
    state = json.loads((home / "simulated" / "gpu0.json").read_text())
    assert state["power_limit_w"] == 300.0
    assert list((home / "journal").glob("*.json")) == []  # nothing left for `wattwise restore` to do
