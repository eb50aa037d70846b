"""The flags: wattwise's settings read from prefixed environment variables, for both frameworks.

`ACCELERATE_ENERGY=1` turns wattwise on for Accelerate, `LIGHTNING_ENERGY=1` for Lightning; the settings
of each are `<PREFIX>_<NAME>` for every `wattwise.config.SETTINGS` name, plus `<PREFIX>_CONFIG` (a YAML
with any other key) and `<PREFIX>_OVERRIDES` (a dotlist). Both prefixes are read here, the same way, so
a variable means the same under either framework, and an error names the variable that set the value.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Collection, Mapping
from typing import Any

from wattwise.config import (
    SETTINGS,
    EnergyConfig,
    check_cap_given,
    check_setting_types,
    key_type,
    load_config,
    overrides_list,
    setting_values,
)
from wattwise.errors import ConfigError

ACCELERATE = "ACCELERATE_ENERGY"
LIGHTNING = "LIGHTNING_ENERGY"
PREFIXES = (ACCELERATE, LIGHTNING)
#: Set (to "1") by `wattwise run` for its command: what the command's runs would warn of at their start and
#: `wattwise run` says once at its end (nothing to measure on this machine) is left to `wattwise run`.
UNDER_WATTWISE_RUN = "WATTWISE_RUN_COMMAND"
#: What takes each flag's settings in code, for messages about a value set there (not by a variable).
OWNERS = {ACCELERATE: "EnergyPlugin", LIGHTNING: "FlagEnergyCallback"}
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def parse_bool(var: str, raw: str) -> bool:
    """A flag's value as a boolean.

    Raises:
        ConfigError: the value is neither on (1, true, yes, on) nor off (0, false, no, off, empty); the
            message names the variable.
    """
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ConfigError(
        f"{var} must be one of {', '.join(TRUE)} (on) or {', '.join(v for v in FALSE if v)} (off) (got {raw!r})"
    )


def _parse_float(var: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{var} must be a number, e.g. {var}=0.5 (got {raw!r})") from None


def _parse_int(var: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{var} must be a whole number, e.g. {var}=10 (got {raw!r})") from None


def _parse_str(var: str, raw: str) -> str:
    return raw.strip()


def _parse_dotlist(var: str, raw: str) -> list[str]:
    try:
        return shlex.split(raw)
    except ValueError as err:
        raise ConfigError(
            f"{var} must be space-separated key=value items, e.g. "
            f"{var}='power_limit.profile_steps=10 devices.gpus=[0,1]' ({err})"
        ) from None


#: A field's value as its variable gives it: a setting's scalar, the config's path, or the overrides.
FlagValue = bool | int | float | str | list[str]

_PARSERS: dict[type, Callable[[str, str], FlagValue]] = {
    bool: parse_bool,
    float: _parse_float,
    int: _parse_int,
    str: _parse_str,
}

#: How each field is read from its variable: the settings by their config key's type, then the two sources.
READERS: dict[str, Callable[[str, str], FlagValue]] = {
    **{s.name: _PARSERS[key_type(s.key)] for s in SETTINGS},
    "config": _parse_str,
    "overrides": _parse_dotlist,
}
#: Every field a flag sets: the settings, `config` and `overrides`.
FIELDS: tuple[str, ...] = tuple(READERS)


def env_var(prefix: str, name: str) -> str:
    """The variable of a field: `<PREFIX>_<NAME>`."""
    return f"{prefix}_{name.upper()}"


def env_vars(prefix: str) -> tuple[str, ...]:
    """Every variable read under `prefix`; any other `<PREFIX>_*` variable is a typo."""
    return (prefix, *(env_var(prefix, name) for name in FIELDS))


def enabled(prefix: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the flag `prefix` is on (`1`/`true`/`yes`/`on`); a value that is neither on nor off raises."""
    environ = os.environ if environ is None else environ
    return parse_bool(prefix, environ.get(prefix, ""))


def read_env(prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, FlagValue]:
    """The fields set by `<PREFIX>_*` variables (empty ones are unset), parsed; an unknown variable raises."""
    environ = os.environ if environ is None else environ
    known = env_vars(prefix)
    unknown = sorted(k for k in environ if k.startswith(f"{prefix}_") and k not in known)
    if unknown:
        raise ConfigError(f"unknown variable {unknown[0]}; wattwise reads {', '.join(known)}")
    values: dict[str, FlagValue] = {}
    for name, parse in READERS.items():
        var = env_var(prefix, name)
        raw = environ.get(var)
        if raw is not None and raw.strip():
            values[name] = parse(var, raw)
    return values


def to_config(prefix: str, values: Mapping[str, Any], from_env: Collection[str]) -> EnergyConfig:
    """The validated `EnergyConfig` of `values` (fields by name; None: not given).

    A bad value is a `ConfigError` naming the variable that set it (the fields in `from_env` and the ones
    not given).
    """
    owner = OWNERS.get(prefix, prefix)
    given_as = {name: env_var(prefix, name) for name in from_env}
    given = check_setting_types(owner, {s.name: values.get(s.name) for s in SETTINGS}, given_as)
    config = values.get("config")
    overrides = overrides_list(owner, values.get("overrides"), given_as)
    try:
        cfg = load_config([config] if config else [], overrides, setting_values(given))
    except ConfigError as err:
        # A key an override sets keeps its name: the override, not the variable, gave the value.
        overridden = {item.split("=", 1)[0].strip() for item in overrides}
        names = {
            s.key: env_var(prefix, s.name)
            for s in SETTINGS
            if (values.get(s.name) is None or s.name in from_env) and s.key not in overridden
        }
        if config is None or "config" in from_env:
            names["config"] = env_var(prefix, "config")
        raise err.renamed(names) from None
    check_cap_given(owner, cfg, given, given_as)
    return cfg


def config_from_env(prefix: str, environ: Mapping[str, str] | None = None) -> EnergyConfig:
    """The `EnergyConfig` the `<PREFIX>_*` variables give (whether or not the flag itself is on)."""
    values = read_env(prefix, environ)
    return to_config(prefix, values, values)


__all__ = [
    "ACCELERATE",
    "FALSE",
    "FIELDS",
    "LIGHTNING",
    "PREFIXES",
    "READERS",
    "TRUE",
    "config_from_env",
    "enabled",
    "env_var",
    "env_vars",
    "parse_bool",
    "read_env",
    "to_config",
]
