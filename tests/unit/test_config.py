"""Configuration: defaults, YAML layers and dotlist overrides; every mistake is a ConfigError naming the key."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.support.config_samples import COMPANIONS, SAMPLES, text, value_at
from tests.support.paths import REPO_ROOT
from wattwise.config import (
    SETTING,
    SETTINGS,
    EnergyConfig,
    config_keys,
    default_of,
    key_type,
    load_config,
    setting_values,
    to_yaml,
)
from wattwise.errors import ConfigError, UsageError

CONFIGS = REPO_ROOT / "configs"


@pytest.fixture(autouse=True)
def _isolated_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))


def yaml_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_load_without_any_input() -> None:
    cfg = load_config()
    assert isinstance(cfg, EnergyConfig)
    assert cfg.power_limit.mode == "measure"
    assert cfg.devices.backend == "auto"


def test_config_error_is_a_usage_error() -> None:
    assert issubclass(ConfigError, UsageError)
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("power_limit.etaa=0.3", "power_limit.etaa"),
        ("nonsense=1", "nonsense"),
        ("devices.simulated.gpus=2", "devices.simulated.gpus"),
    ],
)
def test_an_unknown_key_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"unknown config key '{key}'"):
        load_config(overrides=[override])


def test_an_unknown_key_in_yaml_names_the_key(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "typo.yaml", "power_limit:\n  mode: tune\n  selecter: energy\n")
    with pytest.raises(ConfigError, match=r"power_limit\.selecter"):
        load_config([path])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("power_limit.eta=abc", "power_limit.eta"),
        ("power_limit.wait_steps=1.5", "power_limit.wait_steps"),
        ("strict=maybe", "strict"),
        ("devices.gpus=[0,x]", "devices.gpus"),
        ("monitor.sample_interval_s=fast", "monitor.sample_interval_s"),
    ],
)
def test_a_wrong_type_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key '{key}"):
        load_config(overrides=[override])


def test_a_wrong_type_from_values_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"'power_limit\.eta'"):
        load_config(values={"power_limit": {"eta": [0.5]}})


def test_a_scalar_given_for_a_section_names_the_section(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "flat.yaml", "power_limit: 250\n")  # meant power_limit.cap_w
    with pytest.raises(ConfigError, match=r"\bpower_limit\b"):
        load_config([path])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("power_limit.mode=turbo", "power_limit.mode"),
        ("power_limit.selector=fastest", "power_limit.selector"),
        ("devices.backend=cuda", "devices.backend"),
    ],
)
def test_an_invalid_choice_names_the_key_and_the_choices(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} must be one of .*got"):
        load_config(overrides=[override])


@pytest.mark.parametrize("eta", ["1.5", "-0.1", "nan", "inf"])
def test_eta_outside_zero_to_one_is_refused(eta: str) -> None:
    with pytest.raises(ConfigError, match=r"power_limit\.eta must be between 0 and 1"):
        load_config(overrides=[f"power_limit.eta={eta}"])


@pytest.mark.parametrize("eta", ["0", "1", "0.25"])
def test_eta_at_and_inside_the_ends_is_accepted(eta: str) -> None:
    assert load_config(overrides=[f"power_limit.eta={eta}"]).power_limit.eta == float(eta)


@pytest.mark.parametrize("extra", [[], ["power_limit.cap_w=200", "power_limit.cap_fraction=0.7"]])
def test_cap_mode_needs_exactly_one_of_watts_or_fraction(extra: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"exactly one of power_limit\.cap_w .* or power_limit\.cap_fraction"):
        load_config(overrides=["power_limit.mode=cap", *extra])


def test_cap_mode_with_watts_or_fraction_is_accepted() -> None:
    assert load_config(overrides=["power_limit.mode=cap", "power_limit.cap_w=200"]).power_limit.cap_w == 200.0
    cfg = load_config(overrides=["power_limit.mode=cap", "power_limit.cap_fraction=0.7"])
    assert cfg.power_limit.cap_fraction == 0.7


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("power_limit.cap_fraction=1.5", "power_limit.cap_fraction"),
        ("power_limit.cap_w=-10", "power_limit.cap_w"),
    ],
)
def test_a_cap_out_of_range_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(overrides=["power_limit.mode=cap", override])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("devices.simulated.num_gpus=0", "devices.simulated.num_gpus"),
        ("monitor.sample_interval_s=0", "monitor.sample_interval_s"),
        ("power_limit.profile_steps=0", "power_limit.profile_steps"),
        ("power_limit.wait_steps=-1", "power_limit.wait_steps"),
        ("power_limit.step_w=0", "power_limit.step_w"),
    ],
)
def test_a_value_out_of_range_names_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(overrides=[override])


def test_carbon_awareness_needs_tuning_and_one_intensity_source() -> None:
    with pytest.raises(ConfigError, match=r"power_limit\.mode=tune"):
        load_config(overrides=["carbon.aware=true", "carbon.intensity_g_per_kwh=300"])
    with pytest.raises(ConfigError, match=r"exactly one of carbon\.intensity .*, carbon\.intensity_csv or"):
        load_config(overrides=["carbon.aware=true", "power_limit.mode=tune"])


def test_an_override_without_equals_sign_is_refused() -> None:
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["power_limit.eta"])


def test_a_missing_yaml_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nowhere\.yaml.*not found"):
        load_config([tmp_path / "nowhere.yaml"])


def test_a_malformed_yaml_file_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = yaml_file(tmp_path, "bad.yaml", "power_limit: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml"):
        load_config([path])


def test_later_layers_win_yaml_then_values_then_dotlist(tmp_path: Path) -> None:
    base = yaml_file(tmp_path, "base.yaml", "job: resnet\npower_limit:\n  mode: tune\n  eta: 0.2\n  step_w: 50\n")
    site = yaml_file(tmp_path, "site.yaml", "power_limit:\n  eta: 0.4\n  selector: energy\n")
    cfg = load_config(
        [base, site], overrides=["power_limit.eta=0.9"], values={"power_limit": {"selector": "time", "eta": 0.6}}
    )
    assert cfg.job == "resnet"  # only in base
    assert cfg.power_limit.mode == "tune"  # only in base
    assert cfg.power_limit.step_w == 50.0  # only in base
    assert cfg.power_limit.selector == "time"  # site said energy, values said time
    assert cfg.power_limit.eta == 0.9  # dotlist beats everything
    assert cfg.power_limit.warmup_steps == 2  # default untouched


def test_a_second_yaml_overrides_the_first(tmp_path: Path) -> None:
    a = yaml_file(tmp_path, "a.yaml", "power_limit:\n  eta: 0.2\n")
    b = yaml_file(tmp_path, "b.yaml", "power_limit:\n  eta: 0.4\n")
    assert load_config([a, b]).power_limit.eta == 0.4
    assert load_config([b, a]).power_limit.eta == 0.2


def test_a_yaml_layer_can_make_an_otherwise_valid_override_invalid(tmp_path: Path) -> None:
    cap = yaml_file(tmp_path, "cap.yaml", "power_limit:\n  mode: cap\n  cap_w: 200\n")
    with pytest.raises(ConfigError, match="exactly one"):
        load_config([cap], overrides=["power_limit.cap_fraction=0.5"])


def test_to_yaml_round_trips(tmp_path: Path) -> None:
    cfg = load_config(overrides=["power_limit.mode=cap", "power_limit.cap_w=225", "job=bert"])
    path = yaml_file(tmp_path, "dump.yaml", to_yaml(cfg))
    assert load_config([path]) == cfg


def config_files() -> list[Path]:
    return sorted([*CONFIGS.glob("*.yaml"), *CONFIGS.glob("*.yml")]) if CONFIGS.is_dir() else []


@pytest.mark.parametrize("path", config_files(), ids=lambda p: p.name)
def test_every_yaml_in_configs_loads(path: Path) -> None:
    raw = OmegaConf.to_container(OmegaConf.load(path))
    if isinstance(raw, dict) and "trainer" in raw:
        # A LightningCLI file: our callbacks must accept their init_args, as LightningCLI will pass them.
        callbacks = [
            c
            for c in raw["trainer"].get("callbacks") or []
            if str(c.get("class_path", "")).startswith(("lightning_energy", "accelerate_energy"))
        ]
        assert callbacks, f"{path.name} is a LightningCLI file without a wattwise callback"
        pytest.importorskip("lightning")
        for entry in callbacks:
            module, _, name = entry["class_path"].rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            cls(**(entry.get("init_args") or {}))
        return
    load_config([path])


# -- one configuration source: the settings table, configs/energy.yaml, and a value for every key ------


def test_there_is_a_sample_for_every_config_key_and_none_is_the_default() -> None:
    assert list(SAMPLES) == config_keys()  # a new field needs a sample, so the reach tests cover it
    for key, value in SAMPLES.items():
        assert value != default_of(key), key
        assert isinstance(value, key_type(key)), key
        assert value_at(load_config(overrides=[f"{key}={text(value)}", *COMPANIONS.get(key, [])]), key) == value


def test_config_keys_walks_every_section() -> None:
    keys = config_keys()
    assert "power_limit.eta" in keys and "devices.simulated.state_dir" in keys and "strict" in keys
    assert not any(key in ("devices", "power_limit", "devices.simulated") for key in keys)
    assert (key_type("power_limit.cap_w"), key_type("devices.gpus"), key_type("strict")) == (float, list, bool)


def test_every_setting_is_one_config_key_under_a_unique_name() -> None:
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)
    assert len({s.key for s in SETTINGS}) == len(SETTINGS)
    assert {s.key for s in SETTINGS} <= set(config_keys())
    assert SETTING["max_slowdown"].key == "power_limit.max_slowdown"
    assert {"config", "overrides"}.isdisjoint(SETTING)  # the two sources are not settings


def test_setting_values_nest_by_config_key_and_skip_none() -> None:
    values = setting_values({"eta": 0.3, "backend": "simulated", "job": None, "strict": False})
    assert values == {"power_limit": {"eta": 0.3}, "devices": {"backend": "simulated"}, "strict": False}
    cfg = load_config(values=values)
    assert (cfg.power_limit.eta, cfg.devices.backend, cfg.strict) == (0.3, "simulated", False)


def test_an_error_names_its_settings_as_data_that_each_entry_point_shows_its_own_way() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["power_limit.mode=cap"])
    err = caught.value
    assert err.keys == ("power_limit.mode", "power_limit.cap_w", "power_limit.cap_fraction")
    assert str(err).startswith("power_limit.mode=cap needs exactly one of power_limit.cap_w (watts) or")
    flags = {"power_limit.mode": "--mode", "power_limit.cap_w": "--cap-w", "power_limit.cap_fraction": "--cap-fraction"}
    assert err.message(flags).startswith("--mode=cap needs exactly one of --cap-w (watts) or --cap-fraction (")
    # An entry point that hands the error on (the demo to the command line) renames what it knows; the
    # next one renames again.
    handed_on = err.renamed({"power_limit.mode": "mode"})
    assert isinstance(handed_on, ConfigError) and handed_on.keys[0] == "mode"
    assert handed_on.message({"mode": "--mode"}) == err.message(
        flags | {"power_limit.cap_w": "power_limit.cap_w"}
    ).replace("--cap-fraction", "power_limit.cap_fraction")


def test_a_setting_is_renamed_only_where_the_message_names_it() -> None:
    # "job" is the setting here, not the word in "the job store"; a name inside another is never touched.
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["job=../up"])
    assert caught.value.message({"job": "--job"}).startswith("--job: '../up' is not a valid name")
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=["power_limit.eta=2"])
    assert caught.value.message({"eta": "--eta"}).startswith("power_limit.eta must be between 0 and 1")


def test_energy_yaml_lists_every_key_with_its_default() -> None:
    raw = OmegaConf.to_container(OmegaConf.load(CONFIGS / "energy.yaml"))
    assert raw == OmegaConf.to_container(OmegaConf.structured(EnergyConfig()))
    assert load_config([CONFIGS / "energy.yaml"]) == EnergyConfig()


def test_energy_yaml_says_log_every_n_steps_follows_the_trainer() -> None:
    line = next(ln for ln in (CONFIGS / "energy.yaml").read_text().splitlines() if ln.startswith("log_every_n"))
    assert line.split("#")[0].split(":")[1].strip() == "null" and "Trainer" in line


def test_a_negative_carbon_threshold_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"carbon\.threshold_g_per_kwh must be >= 0"):
        load_config(overrides=["carbon.threshold_g_per_kwh=-1"])
