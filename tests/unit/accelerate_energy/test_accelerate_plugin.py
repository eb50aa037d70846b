"""The Accelerate flag: `ACCELERATE_ENERGY_*` variables read into `EnergyPlugin` and an `EnergyConfig`."""

from __future__ import annotations

import dataclasses

import pytest
from accelerate import Accelerator

import accelerate_energy
from accelerate_energy import EnergyPlugin
from accelerate_energy.plugin import ENV_VARS
from tests.support.config_samples import COMPANIONS, SAMPLES, text, value_at
from wattwise.config import SETTINGS, config_keys
from wattwise.errors import ConfigError

pytestmark = pytest.mark.usefixtures("fresh_accelerate")


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
    assert (cfg.output_dir, cfg.job, cfg.strict, cfg.devices.backend) == (
        str(tmp_path / "runs"),
        "nightly",
        True,
        "simulated",
    )


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


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("ACCELERATE_ENERGY_ETA", "half", "ACCELERATE_ENERGY_ETA must be a number"),
        ("ACCELERATE_ENERGY_ETA", "2", "ACCELERATE_ENERGY_ETA must be between 0 and 1"),
        ("ACCELERATE_ENERGY_MODE", "tuning", "ACCELERATE_ENERGY_MODE must be one of measure, tune, cap"),
        ("ACCELERATE_ENERGY_SELECTOR", "fast", "ACCELERATE_ENERGY_SELECTOR must be one of"),
        ("ACCELERATE_ENERGY_BACKEND", "cuda", "ACCELERATE_ENERGY_BACKEND must be one of auto, nvml, simulated"),
        ("ACCELERATE_ENERGY_STRICT", "maybe", "ACCELERATE_ENERGY_STRICT must be one of 1, true"),
        ("ACCELERATE_ENERGY_CONFIG", "/nonexistent/energy.yaml", "not found"),
        ("ACCELERATE_ENERGY_MDOE", "tune", "unknown variable ACCELERATE_ENERGY_MDOE"),
    ],
)
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


# -- every setting and every config key reaches the Accelerate variables --------------------------------

#: The variables of the first release: a contract, never renamed or dropped.
RELEASED_VARS = (
    "ACCELERATE_ENERGY",
    "ACCELERATE_ENERGY_MODE",
    "ACCELERATE_ENERGY_SELECTOR",
    "ACCELERATE_ENERGY_ETA",
    "ACCELERATE_ENERGY_CAP_W",
    "ACCELERATE_ENERGY_CAP_FRACTION",
    "ACCELERATE_ENERGY_OUTPUT_DIR",
    "ACCELERATE_ENERGY_CONFIG",
    "ACCELERATE_ENERGY_JOB",
    "ACCELERATE_ENERGY_STRICT",
    "ACCELERATE_ENERGY_BACKEND",
)


def test_the_plugin_has_a_field_and_a_variable_for_every_setting():
    names = [f.name for f in dataclasses.fields(EnergyPlugin) if f.init]
    assert set(names) == {"enabled", "config", "overrides", *(s.name for s in SETTINGS)}
    assert set(RELEASED_VARS) <= set(ENV_VARS)
    assert {"ACCELERATE_ENERGY_MAX_SLOWDOWN", "ACCELERATE_ENERGY_OVERRIDES"} <= set(ENV_VARS)
    assert set(ENV_VARS) == {"ACCELERATE_ENERGY", *(f"ACCELERATE_ENERGY_{n.upper()}" for n in names if n != "enabled")}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_setting_reaches_the_config_from_its_variable(monkeypatch, setting):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv(f"ACCELERATE_ENERGY_{setting.name.upper()}", text(SAMPLES[setting.key]))
    if setting.name in ("cap_w", "cap_fraction"):  # a cap needs mode cap
        monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "cap")
    assert value_at(EnergyPlugin().to_config(), setting.key) == SAMPLES[setting.key]


@pytest.mark.parametrize("key", config_keys())
def test_every_config_key_reaches_the_config_from_the_overrides_variable(monkeypatch, key):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    items = [f"{key}={text(SAMPLES[key])}", *COMPANIONS.get(key, [])]
    monkeypatch.setenv("ACCELERATE_ENERGY_OVERRIDES", " ".join(items))
    assert value_at(EnergyPlugin().to_config(), key) == SAMPLES[key]


def test_overrides_in_code_replace_the_overrides_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_OVERRIDES", "power_limit.profile_steps=9 'job=a b'")
    cfg = EnergyPlugin().to_config()
    assert (cfg.power_limit.profile_steps, cfg.job) == (9, "a b")
    assert EnergyPlugin(overrides=["power_limit.step_w=50"]).to_config().power_limit.profile_steps == 5


def test_a_bad_value_in_the_overrides_variable_names_its_key(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_OVERRIDES", "power_limit.eta=2")
    with pytest.raises(ConfigError, match=r"^power_limit\.eta must be between 0 and 1"):
        EnergyPlugin().to_config()
    monkeypatch.setenv("ACCELERATE_ENERGY_OVERRIDES", "'unclosed")
    with pytest.raises(ConfigError, match="ACCELERATE_ENERGY_OVERRIDES must be space-separated"):
        EnergyPlugin()


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("ACCELERATE_ENERGY_MAX_SLOWDOWN", "-1", "ACCELERATE_ENERGY_MAX_SLOWDOWN must be >= 0"),
        ("ACCELERATE_ENERGY_LOG_EVERY_N_STEPS", "often", "ACCELERATE_ENERGY_LOG_EVERY_N_STEPS must be a whole number"),
        ("ACCELERATE_ENERGY_LOG_EVERY_N_STEPS", "0", "ACCELERATE_ENERGY_LOG_EVERY_N_STEPS must be > 0"),
    ],
)
def test_a_bad_new_variable_is_named_in_the_error(monkeypatch, var, value, expected):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=expected):
        EnergyPlugin().to_config()


def test_a_value_zero_set_in_code_is_not_replaced_by_its_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_ETA", "0.7")
    assert EnergyPlugin(eta=0.0).to_config().power_limit.eta == 0.0


def test_printing_the_trainer_callback_names_its_settings(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.delenv("WATTWISE_BACKEND", raising=False)
    from accelerate_energy import EnergyTrainerCallback

    callback = EnergyTrainerCallback(mode="cap", cap_w=200.0, job="bert", backend="simulated")
    assert repr(callback) == "EnergyTrainerCallback(mode='cap', eta=0.5, job='bert', backend='simulated')"
    flag = EnergyTrainerCallback.for_flag()
    assert repr(flag) == "EnergyTrainerCallback(settings from the ACCELERATE_ENERGY_* environment variables)"
