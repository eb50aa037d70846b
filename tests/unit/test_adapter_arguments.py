"""The settings a user gives the Lightning callback and the Accelerate plugin in code: one validation
(`wattwise.config.arguments_config` and `wattwise.flags.to_config`) refuses what used to pass silently."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelerate_energy.plugin import EnergyPlugin
from lightning_energy import EnergyCallback
from wattwise.config import EnergyConfig
from wattwise.errors import ConfigError


def callback_config(*args: Any, **kwargs: Any) -> EnergyConfig:
    return EnergyCallback(*args, **kwargs).config


def plugin_config(*args: Any, **kwargs: Any) -> EnergyConfig:
    return EnergyPlugin(*args, enabled=True, **kwargs).to_config()


ADAPTERS = {"EnergyCallback": callback_config, "EnergyPlugin": plugin_config}


@pytest.fixture(params=sorted(ADAPTERS))
def adapter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Callable[..., EnergyConfig]]:
    for name in [k for k in os.environ if k.startswith("ACCELERATE_ENERGY")]:
        monkeypatch.delenv(name)
    return request.param, ADAPTERS[request.param]


@pytest.mark.parametrize(
    "overrides",
    ["power_limit.profile_steps=3 power_limit.step_w=50", ["power_limit.profile_steps=3", "power_limit.step_w=50"]],
)
def test_overrides_are_a_list_or_one_string_as_the_variable_takes_them(adapter, overrides) -> None:
    _, make = adapter
    cfg = make(overrides=overrides)
    assert (cfg.power_limit.profile_steps, cfg.power_limit.step_w) == (3, 50.0)


def test_one_override_as_a_string_is_one_override(adapter) -> None:
    _, make = adapter
    assert make(overrides="power_limit.profile_steps=3").power_limit.profile_steps == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"mode": "tune", "cap_w": 200},
            r"\(cap_w=200\) is a cap, which applies only in mode 'cap' \(the mode is "
            r"'tune'\); set mode='cap'",
        ),
        ({"cap_fraction": 0.7}, r"\(cap_fraction=0.7\) is a cap.*the mode is 'measure'"),
        ({"output_dir": 3}, r"\(output_dir=3\): output_dir must be a string"),
        ({"eta": "0.5"}, r"\(eta='0.5'\): eta must be a number"),
        ({"strict": 1}, r"\(strict=1\): strict must be True or False"),
        ({"log_every_n_steps": 2.5}, r"\(log_every_n_steps=2.5\): log_every_n_steps must be a whole number"),
        ({"overrides": 3}, r"\(overrides=3\): overrides must be a list of key=value strings or one string"),
    ],
)
def test_a_silently_ignored_or_converted_argument_is_refused_naming_it(adapter, kwargs, message) -> None:
    owner, make = adapter
    with pytest.raises(ConfigError, match=rf"^{owner}{message}"):
        make(**kwargs)


def test_positional_arguments_are_refused_naming_the_fix(adapter) -> None:
    owner, make = adapter
    with pytest.raises(ConfigError, match=rf"{owner} takes keyword arguments only \(got 'tune' in position 1\)"):
        make("tune")


def test_a_cap_in_mode_cap_and_a_path_for_output_dir_are_taken(adapter, tmp_path: Path) -> None:
    _, make = adapter
    cfg = make(mode="cap", cap_w=200, output_dir=tmp_path / "runs")
    assert (cfg.power_limit.cap_w, cfg.output_dir) == (200.0, str(tmp_path / "runs"))


def test_a_cap_variable_outside_mode_cap_names_the_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_ENERGY", "1")
    monkeypatch.setenv("ACCELERATE_ENERGY_MODE", "tune")
    monkeypatch.setenv("ACCELERATE_ENERGY_CAP_W", "200")
    with pytest.raises(
        ConfigError,
        match=r"^ACCELERATE_ENERGY_CAP_W=200.0 is a cap.*set ACCELERATE_ENERGY_MODE=cap "
        r"to cap the power, or leave ACCELERATE_ENERGY_CAP_W out",
    ):
        EnergyPlugin().to_config()
