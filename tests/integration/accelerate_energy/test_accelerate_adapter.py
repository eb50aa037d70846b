"""`accelerate_energy.attach` in real Accelerate loops on simulated GPUs driven by a virtual clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.accelerate_fixtures import summary

pytestmark = pytest.mark.usefixtures("fresh_accelerate")

SCRIPT = textwrap.dedent("""
    import torch
    from torch import nn
    from accelerate import Accelerator
    import accelerate_energy
    from wattwise.tools.workload import emulate_step, tiny_dataset, tiny_model

    accelerator = accelerate_energy.attach(Accelerator(cpu=True))
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer = accelerator.prepare(model, optimizer)
    gpus = accelerate_energy.energy_run(accelerator).gpus
    x, y = tiny_dataset(32).tensors
    for _ in range(3):
        emulate_step(gpus, lambda: accelerator.backward(nn.functional.mse_loss(model(x), y)))
        optimizer.step()
        optimizer.zero_grad()
    {ending}
""")


@pytest.mark.parametrize(
    ("ending", "status"),
    [("raise RuntimeError('training broke')", "failed"), ("pass  # no end_training()", "completed")],
)
def test_a_script_that_ends_without_end_training_restores_the_limit_and_writes_the_summary(tmp_path, ending, status):
    home = tmp_path / "home"
    env = {
        **os.environ,
        "WATTWISE_HOME": str(home),
        "ACCELERATE_ENERGY": "1",
        "ACCELERATE_ENERGY_MODE": "cap",
        "ACCELERATE_ENERGY_CAP_W": "150",
        "ACCELERATE_ENERGY_BACKEND": "simulated",
        "ACCELERATE_ENERGY_OUTPUT_DIR": str(tmp_path / "run"),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(ending=ending)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert (proc.returncode != 0) == (status == "failed"), proc.stderr
    s = summary(tmp_path)
    assert s["status"] == status and s["steps"] == 3
    assert s["power_limit"]["chosen_power_limit_w"] == 150.0
    # The simulated GPU keeps its settings in a file, as a real GPU outlives the process: back at 300 W.
    assert json.loads((home / "simulated" / "gpu0.json").read_text())["power_limit_w"] == 300.0
    assert not list((home / "journal").glob("*.json"))
