"""`devices.simulated_drive=off`, from `--set` or unquoted YAML, is the word `off` (YAML 1.1 reads it as false)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wattwise.config import ConfigError, load_config


def test_off_from_a_dotlist_or_unquoted_yaml_is_off(tmp_path: Path) -> None:
    assert load_config(overrides=["devices.simulated_drive=off"]).devices.simulated_drive == "off"
    yaml = tmp_path / "energy.yaml"
    yaml.write_text("devices:\n  simulated_drive: off\n")
    assert load_config([yaml]).devices.simulated_drive == "off"
    assert load_config(overrides=["devices.simulated_drive=steps"]).devices.simulated_drive == "steps"


def test_another_word_is_still_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"devices.simulated_drive must be one of off, steps \(got 'fast'\)"):
        load_config(overrides=["devices.simulated_drive=fast"])
