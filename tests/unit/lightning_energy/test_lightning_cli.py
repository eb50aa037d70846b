"""EnergyCallback configured from LightningCLI YAML (class_path / init_args) and from configs/."""

from __future__ import annotations

import inspect
import sys

import pytest
import yaml
from lightning.pytorch.cli import LightningCLI

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from tests.support.config_samples import COMPANIONS, SAMPLES, text, value_at
from tests.support.paths import REPO_ROOT
from wattwise.config import SETTINGS, config_keys, load_config, to_yaml

REPO = REPO_ROOT


def test_lightning_cli_yaml_builds_and_runs_the_callback(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", sys.argv[:1])  # `args` only: pytest's own arguments are not the CLI's
    energy_yaml = tmp_path / "energy.yaml"
    energy_yaml.write_text(
        "power_limit:\n  profile_steps: 3\n  warmup_steps: 1\ndevices:\n  backend: simulated\n"
        "  simulated:\n    base_step_time_s: 0.002\nmonitor:\n  sample_power: false\n"
    )
    cli_yaml = tmp_path / "cli.yaml"
    cli_yaml.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "accelerator": "cpu",
                    "max_steps": 40,
                    "logger": False,
                    "enable_checkpointing": False,
                    "enable_progress_bar": False,
                    "enable_model_summary": False,
                    "limit_val_batches": 0,
                    "callbacks": [
                        {
                            "class_path": "lightning_energy.EnergyCallback",
                            "init_args": {
                                "mode": "tune",
                                "selector": "energy",
                                "eta": 0.8,
                                "output_dir": str(tmp_path / "run"),
                                "config": str(energy_yaml),
                                "overrides": ["power_limit.step_w=100"],
                            },
                        }
                    ],
                },
                "model": {"dataset_size": 512},
            }
        )
    )
    cli = LightningCLI(
        EmulatedModule, args=["fit", "--config", str(cli_yaml)], save_config_callback=None, seed_everything_default=0
    )  # the seed it chose unasked, without its notice
    callbacks = [c for c in cli.trainer.callbacks if isinstance(c, EnergyCallback)]
    assert len(callbacks) == 1
    cfg = callbacks[0].config
    assert (cfg.power_limit.mode, cfg.power_limit.selector, cfg.power_limit.eta) == ("tune", "energy", 0.8)
    assert cfg.power_limit.profile_steps == 3 and cfg.power_limit.step_w == 100  # from the YAML and overrides
    summary = callbacks[0].summary
    assert summary is not None and summary["power_limit"]["chosen_power_limit_w"] is not None
    assert (tmp_path / "run" / "summary.json").exists()


def test_lightning_cli_rejects_a_bad_init_arg(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", sys.argv[:1])
    cli_yaml = tmp_path / "cli.yaml"
    cli_yaml.write_text(
        yaml.safe_dump(
            {"trainer": {"callbacks": [{"class_path": "lightning_energy.EnergyCallback", "init_args": {"etaa": 0.5}}]}}
        )
    )
    with pytest.raises(SystemExit):
        LightningCLI(EmulatedModule, args=["fit", "--config", str(cli_yaml)], save_config_callback=None)


@pytest.mark.parametrize("name", ["energy.yaml", "tune.yaml", "cap.yaml"])
def test_shipped_energy_configs_load(name):
    cfg = load_config([REPO / "configs" / name])
    assert cfg.power_limit.mode in ("measure", "tune", "cap")


def test_shipped_lightning_cli_config_names_the_callback():
    data = yaml.safe_load((REPO / "configs" / "lightning_cli.yaml").read_text())
    cb = data["trainer"]["callbacks"][0]
    assert cb["class_path"] == "lightning_energy.EnergyCallback"
    EnergyCallback(**cb["init_args"])  # every init_arg is accepted and valid


# -- every setting and every config key reaches the callback --------------------------------------------


def test_the_callback_takes_every_setting_and_the_two_sources_as_keywords():
    params = [
        p.name for p in inspect.signature(EnergyCallback.__init__).parameters.values() if p.kind is p.KEYWORD_ONLY
    ]  # `*args` only refuses positional arguments
    assert set(params) == {"config", "overrides", "devices", *(s.name for s in SETTINGS)}
    # The keywords of the first release stay.
    assert {
        "mode",
        "selector",
        "eta",
        "max_slowdown",
        "cap_w",
        "cap_fraction",
        "job",
        "output_dir",
        "strict",
        "backend",
        "config",
        "overrides",
        "devices",
    } <= set(params)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_reaches_the_config_from_its_keyword(setting):
    cap = {"mode": "cap"} if setting.name in ("cap_w", "cap_fraction") else {}  # a cap needs mode cap
    callback = EnergyCallback(**{setting.name: SAMPLES[setting.key]}, **cap)
    assert value_at(callback.config, setting.key) == SAMPLES[setting.key]


@pytest.mark.parametrize("key", config_keys())
def test_every_config_key_reaches_the_config_from_overrides(key):
    callback = EnergyCallback(overrides=[f"{key}={text(SAMPLES[key])}", *COMPANIONS.get(key, [])])
    assert value_at(callback.config, key) == SAMPLES[key]


def test_every_config_key_reaches_the_config_from_a_yaml(tmp_path):
    cfg = load_config(
        overrides=[
            *(f"{k}={text(v)}" for k, v in SAMPLES.items()),
            "carbon.intensity_csv=null",
            "carbon.intensity=null",
        ]
    )
    path = tmp_path / "all.yaml"
    path.write_text(to_yaml(cfg))
    assert EnergyCallback(config=str(path)).config == cfg
