"""No code changes: the flags alone (`LIGHTNING_ENERGY=1`, `ACCELERATE_ENERGY=1`) and `wattwise run`.

The scripts run here are Accelerate's own shipped test script and plain Lightning scripts with no
wattwise line; only environment variables turn wattwise on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import accelerate
import lightning.pytorch as pl
import pytest
from lightning.pytorch.demos.boring_classes import BoringModel

from lightning_energy import EnergyCallback
from lightning_energy.flag import FlagEnergyCallback, from_env
from tests.support.network import free_port
from tests.support.paths import REPO_ROOT, SCRIPTS_DIR
from wattwise import flags
from wattwise.errors import ConfigError

SCRIPTS = SCRIPTS_DIR
TEST_SYNC = Path(accelerate.__file__).parent / "test_utils" / "scripts" / "test_sync.py"
BIN = Path(sys.executable).parent
TUNE = "power_limit.wait_steps=0 power_limit.warmup_steps=1 power_limit.profile_steps=2 power_limit.step_w=100"


def run(cmd: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`cmd` in `tmp` with only the flags in `env` (none from outside the test), no user config."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ACCELERATE", "LIGHTNING_ENERGY")) and k != "PYTHONPATH"
    }
    clean.update(HF_HOME=str(tmp / "hf"), PYTHONWARNINGS="ignore", **env)
    return subprocess.run(cmd, env=clean, cwd=tmp, capture_output=True, text=True, timeout=240)


def summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


# -- the two flags read through one source -----------------------------------------------------------------


def test_both_prefixes_read_the_same_variables():
    acc = [v.removeprefix(flags.ACCELERATE) for v in flags.env_vars(flags.ACCELERATE)]
    assert acc == [v.removeprefix(flags.LIGHTNING) for v in flags.env_vars(flags.LIGHTNING)]
    for name in (
        "_MODE",
        "_SELECTOR",
        "_ETA",
        "_MAX_SLOWDOWN",
        "_CAP_W",
        "_CAP_FRACTION",
        "_JOB",
        "_OUTPUT_DIR",
        "_CONFIG",
        "_STRICT",
        "_BACKEND",
        "_LOG_EVERY_N_STEPS",
        "_OVERRIDES",
    ):
        assert name in acc


def test_the_lightning_flag_builds_its_callback_from_its_variables(monkeypatch, tmp_path):
    assert from_env() == []
    monkeypatch.setenv("LIGHTNING_ENERGY", "yes")
    monkeypatch.setenv("LIGHTNING_ENERGY_MODE", "cap")
    monkeypatch.setenv("LIGHTNING_ENERGY_CAP_FRACTION", "0.7")
    monkeypatch.setenv("LIGHTNING_ENERGY_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("LIGHTNING_ENERGY_OVERRIDES", "power_limit.step_w=50")
    (callback,) = from_env()
    cfg = callback.config
    assert (cfg.power_limit.mode, cfg.power_limit.cap_fraction, cfg.output_dir) == ("cap", 0.7, str(tmp_path))
    assert cfg.power_limit.step_w == 50
    assert callback.state_key != EnergyCallback().state_key


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("LIGHTNING_ENERGY_ETA", "2", "LIGHTNING_ENERGY_ETA must be between 0 and 1"),
        ("LIGHTNING_ENERGY_ETA", "x", "LIGHTNING_ENERGY_ETA must be a number"),
        ("LIGHTNING_ENERGY_MODE", "cap", "LIGHTNING_ENERGY_MODE=cap needs exactly one of LIGHTNING_ENERGY_CAP_W"),
        ("LIGHTNING_ENERGY_MODEE", "tune", "unknown variable LIGHTNING_ENERGY_MODEE"),
    ],
)
def test_a_bad_lightning_variable_fails_when_the_trainer_is_built_and_is_named(monkeypatch, var, value, message):
    monkeypatch.setenv("LIGHTNING_ENERGY", "1")
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=message):
        pl.Trainer(accelerator="cpu", logger=False)


def test_the_factory_imports_nothing_heavy_and_adds_nothing_when_the_flag_is_off(tmp_path):
    code = (
        "import sys; from importlib.metadata import entry_points; "
        "(ep,) = [e for e in entry_points(group='lightning.pytorch.callbacks_factory') if e.name == 'wattwise']; "
        "print(ep.value, ep.load()()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('wattwise', 'lightning', 'torch', 'accelerate', 'lightning_energy', 'omegaconf')))"
    )
    proc = run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "lightning_energy.flag_factory:callbacks []",
        "['lightning_energy', 'lightning_energy.flag_factory']",
    ]


# -- Lightning, no code ------------------------------------------------------------------------------------


def test_lightning_cli_is_measured_with_the_flag(tmp_path):
    cmd = [
        sys.executable,
        str(SCRIPTS / "zero_code_lightning_cli.py"),
        "fit",
        "--trainer.max_steps=6",
        "--trainer.accelerator=cpu",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.limit_val_batches=1",
    ]
    proc = run(cmd, tmp_path, LIGHTNING_ENERGY="on", LIGHTNING_ENERGY_OUTPUT_DIR="cli")
    assert proc.returncode == 0, proc.stderr
    assert summary(tmp_path / "cli")["steps"] == 6


def test_a_trainer_with_its_own_energy_callback_gets_one_summary(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_ENERGY", "1")
    monkeypatch.setenv("LIGHTNING_ENERGY_OUTPUT_DIR", str(tmp_path / "flag"))
    own = EnergyCallback(output_dir=str(tmp_path / "own"))
    trainer = pl.Trainer(
        max_steps=4,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[own],
    )
    (flag,) = [cb for cb in trainer.callbacks if isinstance(cb, FlagEnergyCallback)]
    trainer.fit(BoringModel())
    assert flag.inert and flag.summaries == []
    assert own.summary is not None and summary(tmp_path / "own")["steps"] == 4
    assert not (tmp_path / "flag").exists()


# -- Accelerate, no code -----------------------------------------------------------------------------------


def test_the_pth_file_is_installed_at_the_top_of_site_packages():
    installed = Path(sysconfig.get_paths()["purelib"]) / "wattwise-accelerate.pth"
    assert installed.is_file()
    assert installed.read_text() == (REPO_ROOT / "accelerate_energy" / "wattwise-accelerate.pth").read_text()
    assert installed.read_text().startswith("import os; ")


def test_the_hook_is_imported_only_with_the_flag(tmp_path):
    code = "import sys; print('accelerate_energy.flag_hook' in sys.modules, 'torch' in sys.modules)"
    assert run([sys.executable, "-c", code], tmp_path).stdout == "False False\n"
    assert run([sys.executable, "-c", code], tmp_path, ACCELERATE_ENERGY="1").stdout == "True False\n"


def test_with_the_flag_a_process_that_imports_no_accelerate_loads_one_tiny_finder_only(tmp_path):
    # `ACCELERATE_ENERGY=1` exported in a shell reaches every Python process: those that never import
    # accelerate (or transformers' Trainer) load the start-up finder and nothing else (issue 27: +24 ms).
    code = "import sys; print(' '.join(sorted(sys.modules)))"
    off = set(run([sys.executable, "-c", code], tmp_path).stdout.split())
    on = set(run([sys.executable, "-c", code], tmp_path, ACCELERATE_ENERGY="1").stdout.split())
    assert on - off == {"accelerate_energy", "accelerate_energy.flag_hook"}


def test_the_start_up_finder_hands_over_when_the_script_imports_accelerate(tmp_path):
    code = (
        "import sys; import accelerate; from accelerate import Accelerator; "
        "print('accelerate_energy.auto_attach' in sys.modules, hasattr(Accelerator.__init__, '_wattwise_flag'))\n"
        "try:\n    Accelerator(cpu=True)\nexcept Exception as err:\n    print(type(err).__name__, err)"
    )
    # A bad variable fails where the accelerator is built, named (the flag on); the flag off reads none.
    on = run([sys.executable, "-c", code], tmp_path, ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_ETA="2")
    handed_over, error = on.stdout.splitlines()
    assert handed_over == "True True"
    assert error.startswith("ConfigError ACCELERATE_ENERGY_ETA must be between 0 and 1"), error
    assert run([sys.executable, "-c", code], tmp_path, ACCELERATE_ENERGY_ETA="2").stdout == "False False\n"


def test_accelerates_own_test_script_is_measured_with_the_flag_alone(tmp_path):
    # One process, as `accelerate launch --cpu` runs it (that launcher is run on two processes below).
    cmd = [sys.executable, str(TEST_SYNC)]
    on = run(cmd, tmp_path, ACCELERATE_USE_CPU="true", ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_OUTPUT_DIR="on")
    assert on.returncode == 0, on.stderr
    found = summary(tmp_path / "on")
    # Its one prepared optimizer, 5 batches accumulated by 2: steps after batches 2, 4 and the last.
    assert (found["status"], found["framework"], found["steps"], found["world_size"]) == (
        "completed",
        "accelerate",
        3,
        1,
    )
    off = run(cmd, tmp_path, ACCELERATE_USE_CPU="true", ACCELERATE_ENERGY_OUTPUT_DIR="off")
    assert off.returncode == 0, off.stderr
    assert not (tmp_path / "off").exists()
    assert off.stdout == on.stdout


def test_accelerates_own_test_script_on_two_processes_writes_one_summary_of_both(tmp_path):
    cmd = [
        str(BIN / "accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        str(TEST_SYNC),
    ]
    proc = run(cmd, tmp_path, ACCELERATE_USE_CPU="1", ACCELERATE_ENERGY="1", ACCELERATE_ENERGY_OUTPUT_DIR="on")
    assert proc.returncode == 0, proc.stderr
    found = summary(tmp_path / "on")
    # 40 samples per process in batches of 16, accumulated by 2: steps after batch 2 and the last (3rd).
    assert (found["status"], found["steps"], found["world_size"]) == ("completed", 2, 2)
    assert sorted(found["energy_per_device_j"]) == ["rank0/gpu0", "rank1/gpu1"]
    assert found["energy_j"] == pytest.approx(sum(found["energy_per_device_j"].values()))


def test_an_explicit_attach_keeps_its_settings_and_attaches_once(tmp_path):
    proc = run(
        [sys.executable, str(SCRIPTS / "zero_code_accelerate_attach.py"), "own"],
        tmp_path,
        ACCELERATE_ENERGY="1",
        ACCELERATE_ENERGY_OUTPUT_DIR="flag",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "output_dir own\n"
    assert summary(tmp_path / "own")["steps"] == 5
    assert not (tmp_path / "flag").exists()


# -- wattwise run ------------------------------------------------------------------------------------------


def test_wattwise_run_tunes_an_unmodified_lightning_script_and_tells_where_the_summary_went(tmp_path):
    # `wattwise run` turns both flags on (LIGHTNING_ENERGY=1 here) for a script with no wattwise line.
    cmd = [
        str(BIN / "wattwise"),
        "run",
        "--mode",
        "tune",
        "--output-dir",
        "runs",
        *(arg for item in TUNE.split() for arg in ("--override", item)),
        "--",
        sys.executable,
        str(SCRIPTS / "zero_code_lightning.py"),
    ]
    proc = run(cmd, tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The script's own output, as without the flag (which adds no callback: the factory test above).
    assert proc.stdout == "global_step 12\n"
    found = summary(tmp_path / "runs")
    assert (found["status"], found["framework"], found["steps"]) == ("completed", "lightning", 12)
    assert found["power_limit"]["mode"] == "tune"
    # BoringModel does not drive the simulated GPU (no emulate_step), so every limit measures the same idle
    # power: tuning chooses none and says why, rather than presenting noise as a choice.
    tuning = found["power_limit"]["tuning"]
    assert tuning["finished"] is False and "nothing drove the simulated GPU" in tuning["reason"]
    assert found["power_limit"]["chosen_power_limit_w"] is None
    # The last line says that the figures are a simulated GPU's idle power, which nothing drove.
    assert proc.stderr.splitlines()[-1].startswith(
        f"wattwise run: summary: {Path('runs', 'summary.json')} (simulated, idle power only (nothing drove "
        "the simulated GPU); completed, 12 steps, "
    )


def test_wattwise_run_exits_with_the_commands_code(tmp_path):
    proc = run(
        [
            str(BIN / "wattwise"),
            "run",
            "--",
            sys.executable,
            "-c",
            "import os, sys; print(os.environ['LIGHTNING_ENERGY'], os.environ['ACCELERATE_ENERGY_JOB']); sys.exit(3)",
        ],
        tmp_path,
        ACCELERATE_ENERGY_JOB="nightly",
    )
    assert proc.returncode == 3
    assert proc.stdout == "1 nightly\n"
    assert proc.stderr.startswith("wattwise run: no summary written to ")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--", "no-such-command-here"], 127, "wattwise run: error: command not found: no-such-command-here"),
        ([], 2, "wattwise run: error: no command given"),
        (["--eta", "2", "--", "true"], 2, "wattwise run: error: --eta must be between 0 and 1"),
        (["--mode", "cap", "--", "true"], 2, "wattwise run: error: --mode=cap needs exactly one of --cap-w"),
        (["--eta", "x", "--", "true"], 2, "wattwise run: error: argument --eta: invalid float value"),
    ],
)
def test_wattwise_run_refuses_bad_input_with_one_line(tmp_path, args, code, message):
    proc = run([str(BIN / "wattwise"), "run", *args], tmp_path)
    assert proc.returncode == code
    assert proc.stderr.startswith(message) and proc.stderr.count("\n") == 1, proc.stderr


def test_wattwise_run_on_a_machine_with_nothing_to_measure_says_so(tmp_path, monkeypatch):
    from wattwise.devices import discover

    monkeypatch.delenv("WATTWISE_BACKEND", raising=False)
    found = discover("auto")
    if found.gpus or found.cpus:
        pytest.skip("this machine has something to measure")
    proc = run(
        [str(BIN / "wattwise"), "run", "--", sys.executable, str(SCRIPTS / "zero_code_lightning.py")],
        tmp_path,
        WATTWISE_BACKEND="",
    )
    assert proc.returncode == 0 and proc.stdout == "global_step 12\n", proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"wattwise run: no summary written to {Path('wattwise_runs', 'summary.json')} (nothing to measure on "
        "this machine: no GPU, and the CPU package's energy counter is not readable; --backend simulated "
        "tries wattwise on the simulated GPU)"
    )
