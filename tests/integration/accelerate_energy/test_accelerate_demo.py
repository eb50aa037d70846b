"""`wattwise demo --framework accelerate`: same options, same JSON and same choice as the Lightning demo."""

from __future__ import annotations

import json
from pathlib import Path

from wattwise.cli.main import main
from wattwise.devices import PowerModel
from wattwise.power_limit import select_power_limit
from wattwise.profile import ProfileEntry
from wattwise.tools.demo import DemoOptions, run_demo

#: Three limits whose Zeus costs (eta 0.5) are far apart, so wall-clock noise on a busy machine cannot
#: change the choice: per step at base time b, 100 W costs 400 b, 200 W 210 b, 300 W 300 b.
POWER_MODEL = "power_limit,time,power\n100,2.0,100\n200,1.0,120\n300,1.0,300\n"
BASE_S = 0.2


def options(tmp_path: Path, framework: str) -> DemoOptions:
    model = tmp_path / "model.csv"
    model.write_text(POWER_MODEL)
    return DemoOptions(
        framework=framework,
        power_model=str(model),
        step_w=100.0,
        wait_steps=1,
        warmup_steps=1,
        profile_steps=3,
        steps_after_tuning=1,
        base_step_time_s=BASE_S,
        output_dir=str(tmp_path / framework),
        state_dir=str(tmp_path / f"{framework}-state"),
    )


def model_choice(path: str) -> float:
    """The choice computed straight from the power model."""
    model = PowerModel.from_csv(path)
    entries = []
    for w in model.power_limits_w:
        t, p = model.at_limit(w)
        entries.append(ProfileEntry(w, t * BASE_S, p * t * BASE_S))
    return select_power_limit(entries, "cost", eta=0.5, max_power_w=model.limit_range_w[1]).power_limit_w


def test_the_same_power_model_gives_the_same_limit_through_accelerate_and_lightning(tmp_path, monkeypatch):
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    accelerate = run_demo(options(tmp_path, "accelerate"))
    lightning = run_demo(options(tmp_path, "lightning"))

    assert model_choice(str(tmp_path / "model.csv")) == 200.0
    assert accelerate["chosen_power_limit_w"] == lightning["chosen_power_limit_w"] == 200.0
    assert accelerate.keys() == lightning.keys()
    assert accelerate["framework"] == "accelerate"
    assert [r["power_limit_w"] for r in accelerate["profile"]] == [300.0, 200.0, 100.0]
    steps = 1 + 3 * (1 + 3) + 1
    assert accelerate["steps"] == lightning["steps"] == steps
    tuned = json.loads((tmp_path / "accelerate" / "summary.json").read_text())
    baseline = json.loads((tmp_path / "accelerate" / "baseline" / "summary.json").read_text())
    assert tuned["framework"] == baseline["framework"] == "accelerate"
    assert baseline["power_limit"] is None and baseline["steps"] == steps


def test_the_cli_runs_the_accelerate_demo(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    model = tmp_path / "model.csv"
    model.write_text(POWER_MODEL)
    code = main(
        [
            "demo",
            "--framework",
            "accelerate",
            "--json",
            "--power-model",
            str(model),
            "--step-w",
            "100",
            "--profile-steps",
            "1",
            "--warmup-steps",
            "0",
            "--steps-after-tuning",
            "1",
            "--base-step-time",
            "0.01",
            "--output-dir",
            str(tmp_path / "demo"),
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["framework"] == "accelerate" and result["simulated"] is True
    assert result["chosen_power_limit_w"] in (100.0, 200.0, 300.0)
    assert (tmp_path / "demo" / "summary.json").is_file()
