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
from dataclasses import dataclass, field
from typing import Any

from wattwise import flags
from wattwise.config import CONFIG_HELP, OVERRIDES_HELP, SETTING, EnergyConfig, refuse_positional

ENV_PREFIX = flags.ACCELERATE
#: Every variable the plugin reads; any other `ACCELERATE_ENERGY_*` variable is a typo.
ENV_VARS: tuple[str, ...] = flags.env_vars(ENV_PREFIX)


def env_var(name: str) -> str:
    """The variable of a plugin field: `ACCELERATE_ENERGY_<NAME>`."""
    return flags.env_var(ENV_PREFIX, name)


def _help(name: str) -> dict[str, str]:
    text = SETTING[name].help if name in SETTING else {"config": CONFIG_HELP, "overrides": OVERRIDES_HELP}[name]
    return {"help": f"{text[0].upper()}{text[1:]}. Env: {env_var(name)}."}


@dataclass
class EnergyPlugin:
    """Energy measurement, power-limit tuning and power capping for Accelerate, off unless enabled.

    Each field left unset (None, or an empty `overrides`) is read from its `ACCELERATE_ENERGY_*` variable
    (when the plugin is enabled). Fields are given by name; `overrides` is a list of `key=value` strings or
    one string of them separated by spaces. A field of the wrong type, or a cap in a mode other than "cap",
    is refused by `to_config` naming the field or the variable that set it.
    """

    enabled: bool | None = field(
        default=None, metadata={"help": "Turn wattwise on. Env: ACCELERATE_ENERGY (1/true/yes/on). Off by default."}
    )
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
    overrides: str | list[str] = field(default_factory=list, metadata=_help("overrides"))
    #: Fields filled from the environment, with the variable each came from (for error messages).
    from_env: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> EnergyPlugin:
        """Refuse positional fields with a message that names the fix (they would be easy to misplace)."""
        refuse_positional(cls.__name__, args)
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if self.enabled is None:
            self.enabled = flags.enabled(ENV_PREFIX)
        if not self.enabled:
            return
        for name, value in flags.read_env(ENV_PREFIX, os.environ).items():
            if getattr(self, name) in (None, []):
                setattr(self, name, value)
                self.from_env[name] = env_var(name)

    def to_config(self) -> EnergyConfig:
        """The validated `EnergyConfig`; a bad value is a `ConfigError` naming the variable that set it."""
        values = {name: getattr(self, name) for name in flags.FIELDS}
        return flags.to_config(ENV_PREFIX, values, self.from_env)
