"""`EnergyPlugin`: the Accelerate flag, read from `ACCELERATE_ENERGY_*` environment variables.

Accelerate's config file rejects unknown keys, and `accelerate launch` hands its environment to every
worker, so the flag is an environment variable read the way Accelerate's own plugins read theirs
(`accelerate.utils.dataclasses`): a dataclass whose `__post_init__` fills the fields left unset from
prefixed variables. Precedence, lowest first: defaults, the YAML of `config`, the environment, fields
set in code, then `overrides`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wattwise.config import EnergyConfig, load_config
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


def _parse_str(var: str, raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True)
class _EnvField:
    """How one plugin field is read from the environment and where it lands in `EnergyConfig`."""

    suffix: str
    parse: Callable[[str, str], Any]
    #: Dotted key in `EnergyConfig`; errors about it are reported under the variable's name.
    config_key: str


_FIELDS: dict[str, _EnvField] = {
    "mode": _EnvField("MODE", _parse_str, "power_limit.mode"),
    "selector": _EnvField("SELECTOR", _parse_str, "power_limit.selector"),
    "eta": _EnvField("ETA", _parse_float, "power_limit.eta"),
    "cap_w": _EnvField("CAP_W", _parse_float, "power_limit.cap_w"),
    "cap_fraction": _EnvField("CAP_FRACTION", _parse_float, "power_limit.cap_fraction"),
    "output_dir": _EnvField("OUTPUT_DIR", _parse_str, "output_dir"),
    "config": _EnvField("CONFIG", _parse_str, "config file"),
    "job": _EnvField("JOB", _parse_str, "job"),
    "strict": _EnvField("STRICT", _parse_bool, "strict"),
    "backend": _EnvField("BACKEND", _parse_str, "devices.backend"),
}

#: Every variable the plugin reads; any other `ACCELERATE_ENERGY_*` variable is a typo.
ENV_VARS: tuple[str, ...] = (ENV_PREFIX, *(f"{ENV_PREFIX}_{f.suffix}" for f in _FIELDS.values()))


@dataclass
class EnergyPlugin:
    """Energy measurement, power-limit tuning and power capping for Accelerate, off unless enabled.

    Each field left as None is read from its `ACCELERATE_ENERGY_*` variable (when the plugin is enabled).
    """

    enabled: bool | None = field(default=None, metadata={
        "help": "Turn wattwise on. Env: ACCELERATE_ENERGY (1/true/yes/on). Off by default."})
    mode: str | None = field(default=None, metadata={
        "help": "measure (default), tune (profile power limits, keep the best) or cap. "
                "Env: ACCELERATE_ENERGY_MODE."})
    selector: str | None = field(default=None, metadata={
        "help": "Tuning objective: cost (default), energy, time or slowdown. Env: ACCELERATE_ENERGY_SELECTOR."})
    eta: float | None = field(default=None, metadata={
        "help": "Weight of energy against time in the cost, 0..1. Env: ACCELERATE_ENERGY_ETA."})
    cap_w: float | None = field(default=None, metadata={
        "help": "Mode cap: the cap in watts. Env: ACCELERATE_ENERGY_CAP_W."})
    cap_fraction: float | None = field(default=None, metadata={
        "help": "Mode cap: the cap as a fraction of the maximum limit. Env: ACCELERATE_ENERGY_CAP_FRACTION."})
    output_dir: str | None = field(default=None, metadata={
        "help": "Where summary.json is written. Env: ACCELERATE_ENERGY_OUTPUT_DIR."})
    config: str | None = field(default=None, metadata={
        "help": "An OmegaConf YAML with any other setting (configs/energy.yaml). Env: ACCELERATE_ENERGY_CONFIG."})
    job: str | None = field(default=None, metadata={
        "help": "Job name: a tuned limit is saved and reused under it. Env: ACCELERATE_ENERGY_JOB."})
    strict: bool | None = field(default=None, metadata={
        "help": "Raise instead of degrading to measurement only. Env: ACCELERATE_ENERGY_STRICT."})
    backend: str | None = field(default=None, metadata={
        "help": "Devices: auto, nvml or simulated. Env: ACCELERATE_ENERGY_BACKEND."})
    overrides: list[str] = field(default_factory=list, metadata={
        "help": "Dotlist overrides applied last, e.g. ['power_limit.profile_steps=10'] (code only)."})
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
        for name, spec in _FIELDS.items():
            var = f"{ENV_PREFIX}_{spec.suffix}"
            raw = environ.get(var)
            if getattr(self, name) is None and raw is not None and raw.strip():
                setattr(self, name, spec.parse(var, raw))
                self.from_env[name] = var

    def to_config(self) -> EnergyConfig:
        """The validated `EnergyConfig`; a bad value is a `ConfigError` naming the variable that set it."""
        values: dict[str, Any] = {}
        for name, spec in _FIELDS.items():
            value = getattr(self, name)
            if value is None or name == "config":
                continue
            node = values
            *parents, leaf = spec.config_key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        try:
            return load_config([self.config] if self.config else [], self.overrides, values)
        except ConfigError as err:
            raise ConfigError(self._in_env_terms(str(err))) from None

    def _in_env_terms(self, message: str) -> str:
        """Name the variables instead of the config keys of fields not set in code."""
        for name, spec in _FIELDS.items():
            if getattr(self, name) is not None and name not in self.from_env:
                continue
            var = f"{ENV_PREFIX}_{spec.suffix}"
            message = re.sub(rf"(?<![\w.]){re.escape(spec.config_key)}(?!\w)", var, message)
        return message
