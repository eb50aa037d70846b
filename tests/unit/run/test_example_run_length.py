"""The Lightning example's default length lets tuning finish and then train at its choice, on the default physics.

The README's quick start runs `examples/lightning_train.py` as it is, on the simulated GPU's realistic
physics (the pages' own tests run the ideal one, whose windows are a few steps). With 500 steps tuning ended
on about the last one, and the run reported a limit it never applied. Here the example's GPU (the built-in
model, 20 ms steps) is driven on a virtual clock for the example's default number of steps.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.tuning_runs import tuning_run
from wattwise.devices import Physics

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lightning_train.py"
#: The example's defaults that matter here: tuning, the monitor's own sampling left out on a virtual clock.
TUNE = ["power_limit.mode=tune", "monitor.sample_power=false", "monitor.sync_cuda=false"]


def default_max_steps() -> int:
    """The `--max-steps` default the example's parser declares."""
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        if isinstance(node, ast.Call) and node.args and getattr(node.args[0], "value", None) == "--max-steps":
            defaults = [k.value for k in node.keywords if k.arg == "default" and isinstance(k.value, ast.Constant)]
            value = defaults[0].value
            assert isinstance(value, int), value
            return value
    raise AssertionError("examples/lightning_train.py declares no --max-steps default")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_examples_default_steps_finish_tuning_and_train_at_the_choice(tmp_path: Path, seed: int) -> None:
    steps = default_max_steps()
    done = tuning_run(
        tmp_path, steps, overrides=TUNE, physics=Physics.realistic(seed), base_step_time_s=0.02, announce_steps=True
    )
    tuner = done.run.power.tuner
    assert tuner is not None and tuner.finished and tuner.chosen is not None
    # A fifth of the run at least at the chosen limit: the saving the run prints is that of a stretch at it.
    assert done.run.power.steps_at_chosen >= steps // 5, done.said
