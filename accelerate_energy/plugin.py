"""`EnergyPlugin`: the Accelerate flag, read from `ACCELERATE_ENERGY_*` environment variables.

Accelerate's config file rejects unknown keys, and `accelerate launch` hands its environment to every
worker, so the flag is an environment variable read the way Accelerate's own plugins read theirs
(`accelerate.utils.dataclasses`): a dataclass whose `__post_init__` fills the fields left unset from
prefixed variables. Its fields are `wattwise.config.SETTINGS` (`ACCELERATE_ENERGY_<NAME>`), `config`
(a YAML with any other key) and `overrides` (a dotlist, `ACCELERATE_ENERGY_OVERRIDES`). Precedence,
lowest first: defaults, the YAML of `config`, the environment, fields set in code, then `overrides`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wattwise.config import (
    CONFIG_HELP,
    OVERRIDES_HELP,
    SETTING,
    SETTINGS,
    EnergyConfig,
    key_type,
    load_config,
    rename_settings,
    setting_values,
)
from wattwise.errors import ConfigError

ENV_PREFIX = "ACCELERATE_ENERGY"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _parse_bool(var: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{var} must be one of {', '.join(_TRUE)} (on) or {', '.join(v for v in _FALSE if v)} "
                      f"(off) (got {raw!r})")


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
        raise ConfigError(f"{var} must be space-separated key=value items, e.g. "
                          f"{var}='power_limit.profile_steps=10 devices.gpus=[0,1]' ({err})") from None


_PARSERS: dict[type, Callable[[str, str], Any]] = {bool: _parse_bool, float: _parse_float, int: _parse_int,
                                                    str: _parse_str}


def env_var(name: str) -> str:
    """The variable of a plugin field: `ACCELERATE_ENERGY_<NAME>`."""
    return f"{ENV_PREFIX}_{name.upper()}"


#: How each field is read from its variable: the settings by their config key's type, then the two sources.
_READERS: dict[str, Callable[[str, str], Any]] = {
    **{s.name: _PARSERS[key_type(s.key)] for s in SETTINGS},
    "config": _parse_str,
    "overrides": _parse_dotlist,
}

#: Every variable the plugin reads; any other `ACCELERATE_ENERGY_*` variable is a typo.
ENV_VARS: tuple[str, ...] = (ENV_PREFIX, *(env_var(name) for name in _READERS))


def _help(name: str) -> dict[str, str]:
    text = SETTING[name].help if name in SETTING else {"config": CONFIG_HELP, "overrides": OVERRIDES_HELP}[name]
    return {"help": f"{text[0].upper()}{text[1:]}. Env: {env_var(name)}."}


@dataclass
class EnergyPlugin:
    """Energy measurement, power-limit tuning and power capping for Accelerate, off unless enabled.

    Each field left unset (None, or an empty `overrides`) is read from its `ACCELERATE_ENERGY_*` variable
    (when the plugin is enabled).
    """

    enabled: bool | None = field(default=None, metadata={
        "help": "Turn wattwise on. Env: ACCELERATE_ENERGY (1/true/yes/on). Off by default."})
    mode: str | None = field(default=None, metadata=_help("mode"))
    selector: str | None = field(default=None, metadata=_help("selector"))
    eta: float | None = field(default=None, metadata=_help("eta"))
    max_slowdown: float | None = field(default=None, metadata=_help("max_slowdown"))
    cap_w: float | None = field(default=None, metadata=_help("cap_w"))
    cap_fraction: float | None = field(default=None, metadata=_help("cap_fraction"))
    output_dir: str | None = field(default=None, metadata=_help("output_dir"))
    config: str | None = field(default=None, metadata=_help("config"))
    job: str | None = field(default=None, metadata=_help("job"))
    strict: bool | None = field(default=None, metadata=_help("strict"))
    backend: str | None = field(default=None, metadata=_help("backend"))
    log_every_n_steps: int | None = field(default=None, metadata=_help("log_every_n_steps"))
    overrides: list[str] = field(default_factory=list, metadata=_help("overrides"))
    #: Fields filled from the environment, with the variable each came from (for error messages).
    from_env: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        environ = os.environ
        if self.enabled is None:
            self.enabled = _parse_bool(ENV_PREFIX, environ.get(ENV_PREFIX, ""))
        if not self.enabled:
            return
        unknown = sorted(k for k in environ if k.startswith(f"{ENV_PREFIX}_") and k not in ENV_VARS)
        if unknown:
            raise ConfigError(f"unknown variable {unknown[0]}; wattwise reads {', '.join(ENV_VARS)}")
        for name, parse in _READERS.items():
            var = env_var(name)
            raw = environ.get(var)
            if getattr(self, name) in (None, []) and raw is not None and raw.strip():
                setattr(self, name, parse(var, raw))
                self.from_env[name] = var

    def to_config(self) -> EnergyConfig:
        """The validated `EnergyConfig`; a bad value is a `ConfigError` naming the variable that set it."""
        values = setting_values({s.name: getattr(self, s.name) for s in SETTINGS})
        try:
            return load_config([self.config] if self.config else [], self.overrides, values)
        except ConfigError as err:
            raise ConfigError(self._in_env_terms(str(err))) from None

    def _in_env_terms(self, message: str) -> str:
        """Name the variables instead of the config keys of fields not set in code.

        A key an override sets keeps its name: the override, not the variable, gave the value.
        """
        overridden = {item.split("=", 1)[0].strip() for item in self.overrides}
        names = {s.key: env_var(s.name) for s in SETTINGS
                 if (getattr(self, s.name) is None or s.name in self.from_env) and s.key not in overridden}
        if self.config is None or "config" in self.from_env:
            names["config file"] = env_var("config")
        return rename_settings(message, names)
