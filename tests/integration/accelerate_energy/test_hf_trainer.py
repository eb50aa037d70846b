"""A Hugging Face `transformers.Trainer` script with `ACCELERATE_ENERGY=1` and nothing else: a tiny GPT-2
built from a config, random tokens, gradient accumulation 2; one and two processes, and a resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import SCRIPTS_DIR

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[dev]')")

SCRIPT = SCRIPTS_DIR / "zero_code_hf_trainer.py"
TUNE = "power_limit.wait_steps=1 power_limit.warmup_steps=1 power_limit.profile_steps=2 power_limit.step_w=100"


def train(
    tmp_path: Path, *args: str, flag: bool = True, processes: int = 1, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_ENERGY")}
    if flag:
        environ.update(ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_OUTPUT_DIR=str(tmp_path / "run"), **env)
    if processes == 1:
        cmd = [sys.executable, str(SCRIPT)]
    else:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
        assert torchrun is not None
        cmd = [torchrun, "--standalone", "--nproc_per_node", str(processes), str(SCRIPT)]
    done = subprocess.run(
        [*cmd, str(tmp_path / "out"), *args], env=environ, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def summary(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "run" / "summary.json").read_text())


def test_trainer_steps_are_its_optimizer_steps_and_its_trackers_get_the_figures_at_its_logging_steps(tmp_path):
    # ACCELERATE_ENERGY=1 alone: no log_every_n_steps, so the figures follow the script's logging_steps=5
    # (its accelerator's own cadence, 50 steps, is longer than the run).
    done = train(tmp_path, "40")
    s = summary(tmp_path)
    assert "global_step 40" in done.stdout
    assert s["steps"] == 40 and s["framework"] == "transformers" and s["status"] == "completed"  # 80 micro-batches
    logged = next(line for line in done.stdout.splitlines() if line.startswith("logged ")).split()
    assert {"energy/step_j", "time/step_s", "power/avg_w"} <= set(logged)
    history = next(line for line in done.stdout.splitlines() if line.startswith("history ")).split()
    assert {"energy/step_j", "time/step_s", "power/avg_w", "energy/fit_j", "time/fit_s"} <= set(history)


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two processes over gloo, tuning, gradient accumulation 2, to a checkpoint at step 20: its folder and
    summary. Started once for the tests that read it (the resume test then resumes it to step 30)."""
    tmp_path = tmp_path_factory.mktemp("two_processes")
    train(
        tmp_path,
        "20",
        processes=2,
        ACCELERATE_ENERGY_MODE="tune",
        ACCELERATE_ENERGY_OVERRIDES=TUNE,
        WATTWISE_HOME=str(tmp_path / "home"),
    )
    return tmp_path, summary(tmp_path)


def test_a_resumed_trainer_keeps_its_energy_and_does_not_tune_again(two_processes):
    # The two processes' run to step 20, then a resume to 30.
    tmp_path, first = two_processes
    assert first["power_limit"]["tuning"]["finished"] is True
    assert (tmp_path / "out" / "checkpoint-20" / "wattwise_energy.json").is_file()
    train(
        tmp_path,
        "30",
        "resume",
        processes=2,
        ACCELERATE_ENERGY_MODE="tune",
        ACCELERATE_ENERGY_OVERRIDES=TUNE,
        WATTWISE_HOME=str(tmp_path / "home"),
    )
    second = summary(tmp_path)
    assert second["steps"] == 30 and second["world_size"] == 2
    # The resumed run profiled nothing: no process's windows log holds a profile window.
    logs = sorted((tmp_path / "run").glob("windows*.csv"))
    assert [p.name for p in logs] == ["windows-rank1.csv", "windows.csv"]
    for log in logs:
        rows = log.read_text().splitlines()
        assert len(rows) > 1 and not [r for r in rows if "power_limit_profile" in r], (log.name, rows)
    saved = json.loads((tmp_path / "out" / "checkpoint-20" / "wattwise_energy.json").read_text())
    assert 0 < saved["energy_j"] <= first["energy_j"]  # at the save, just before the first run's end
    assert second["resumed_energy_j"] == pytest.approx(saved["energy_j"])
    assert second["energy_j"] > first["energy_j"]
    chosen = first["power_limit"]["chosen_power_limit_w"]
    assert second["power_limit"]["chosen_power_limit_w"] == chosen
    assert second["power_limit"]["profile"] == first["power_limit"]["profile"]
    # After the resume only the chosen limit was applied: nothing was profiled again.
    assert {e["value"] for e in second["settings_timeline"]} == {chosen}
    assert second["power_limit"]["tuning"]["steps_at_chosen"] == first["power_limit"]["tuning"]["steps_at_chosen"] + 10


def test_two_processes_write_one_summary_with_energy_summed(two_processes):
    s = two_processes[1]
    assert s["world_size"] == 2 and s["steps"] == 20
    assert sorted(s["energy_per_device_j"]) == ["rank0/gpu0", "rank1/gpu1"]
    assert s["energy_j"] == pytest.approx(sum(s["energy_per_device_j"].values()))


def test_without_the_flag_nothing_is_written(tmp_path):
    train(tmp_path, "10", flag=False)
    assert not (tmp_path / "run").exists()
    assert not list((tmp_path / "out").rglob("wattwise_energy.json"))
