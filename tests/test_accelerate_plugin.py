"""The Accelerate flag: `ACCELERATE_ENERGY_*` variables read into `EnergyPlugin` and an `EnergyConfig`."""

from __future__ import annotations

import os

import pytest
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

import accelerate_energy
from accelerate_energy import EnergyPlugin
from wattwise.errors import ConfigError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    for var in list(os.environ):
        if var.startswith("ACCELERATE_ENERGY"):
            monkeypatch.delenv(var)
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def test_off_unless_the_flag_is_set():
    assert EnergyPlugin().enabled is False


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_the_flag_turns_it_on(monkeypatch, value):
    monkeypatch.setenv("ACCELERATE_ENERGY", value)
    assert EnergyPlugin().enabled is True


def test_variables_fill_the_config(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "tune")
    monkeypatch.setenv("ACCELERATE_ENERGY_SELECTOR", "slowdown")
    monkeypatch.setenv("ACCELERATE_ENERGY_ETA", "0.25")
    monkeypatch.setenv("ACCELERATE_ENERGY_OUTPUT_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("ACCELERATE_ENERGY_JOB", "nightly")
    monkeypatch.setenv("ACCELERATE_ENERGY_STRICT", "yes")
    monkeypatch.setenv("ACCELERATE_ENERGY_BACKEND", "simulated")
    cfg = EnergyPlugin().to_config()
    assert (cfg.power_limit.mode, cfg.power_limit.selector, cfg.power_limit.eta) == ("tune", "slowdown", 0.25)
    assert (cfg.output_dir, cfg.job, cfg.strict, cfg.devices.backend) == (str(tmp_path / "runs"), "nightly", True,
                                                                         "simulated")


def test_cap_from_variables(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "cap")
    monkeypatch.setenv("ACCELERATE_ENERGY_CAP_FRACTION", "0.7")
    cfg = EnergyPlugin().to_config()
    assert (cfg.power_limit.mode, cfg.power_limit.cap_fraction, cfg.power_limit.cap_w) == ("cap", 0.7, None)


def test_yaml_then_environment_then_code(monkeypatch, tmp_path):
    yaml = tmp_path / "energy.yaml"
    yaml.write_text("job: from-yaml\npower_limit:\n  eta: 0.1\n  selector: energy\n  profile_steps: 9\n")
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_CONFIG", str(yaml))
    monkeypatch.setenv("ACCELERATE_ENERGY_ETA", "0.3")
    monkeypatch.setenv("ACCELERATE_ENERGY_SELECTOR", "time")
    cfg = EnergyPlugin(selector="cost").to_config()
    assert cfg.job == "from-yaml"  # YAML only
    assert cfg.power_limit.profile_steps == 9  # YAML only
    assert cfg.power_limit.eta == 0.3  # environment over YAML
    assert cfg.power_limit.selector == "cost"  # code over environment


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("ACCELERATE_ENERGY_ETA", "half", "ACCELERATE_ENERGY_ETA must be a number"),
    ("ACCELERATE_ENERGY_ETA", "2", "ACCELERATE_ENERGY_ETA must be between 0 and 1"),
    ("ACCELERATE_ENERGY_MODE", "tuning", "ACCELERATE_ENERGY_MODE must be one of measure, tune, cap"),
    ("ACCELERATE_ENERGY_SELECTOR", "fast", "ACCELERATE_ENERGY_SELECTOR must be one of"),
    ("ACCELERATE_ENERGY_BACKEND", "cuda", "ACCELERATE_ENERGY_BACKEND must be one of auto, nvml, simulated"),
    ("ACCELERATE_ENERGY_STRICT", "maybe", "ACCELERATE_ENERGY_STRICT must be one of 1, true"),
    ("ACCELERATE_ENERGY_CONFIG", "/nonexistent/energy.yaml", "not found"),
    ("ACCELERATE_ENERGY_MDOE", "tune", "unknown variable ACCELERATE_ENERGY_MDOE"),
])
def test_a_bad_variable_is_named_in_the_error(monkeypatch, var, value, expected):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=expected):
        EnergyPlugin().to_config()


def test_cap_without_a_cap_names_the_variables_to_set(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "cap")
    with pytest.raises(ConfigError) as info:
        EnergyPlugin().to_config()
    assert "ACCELERATE_ENERGY_CAP_W" in str(info.value)
    assert "ACCELERATE_ENERGY_CAP_FRACTION" in str(info.value)


def test_a_bad_flag_value_is_an_error(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "please")
    with pytest.raises(ConfigError, match="ACCELERATE_ENERGY must be one of"):
        EnergyPlugin()


def test_other_variables_are_ignored_while_off(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "nonsense")
    assert EnergyPlugin().enabled is False


def test_attach_leaves_the_accelerator_untouched_while_off(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "tune")
    accelerator = Accelerator(cpu=True)
    assert accelerate_energy.attach(accelerator) is accelerator
    assert "prepare_optimizer" not in vars(accelerator)
    assert "end_training" not in vars(accelerator)
    assert accelerator._custom_objects == []
    assert accelerate_energy.energy_run(accelerator) is None
    assert accelerate_energy.epoch_end(accelerator) is None


def test_attach_fails_early_on_a_bad_setting(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_ETA", "-1")
    with pytest.raises(ConfigError, match="ACCELERATE_ENERGY_ETA"):
        accelerate_energy.attach(Accelerator(cpu=True))
