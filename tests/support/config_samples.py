"""A non-default sample value for every config key, and how a dotlist or an environment variable spells it.

Shared by the tests that check every key reaches the run: from a dotlist, YAML, an environment variable,
the Lightning callback's `init_args` and the Accelerate plugin.
"""

from __future__ import annotations

from typing import Any

from wattwise.config import EnergyConfig

#: A valid value, other than the default, for every key of `EnergyConfig`: the tests that check that
#: every key reaches the callback, the Accelerate variables and the CLI set each to this value.
SAMPLES: dict[str, Any] = {
    "job": "nightly",
    "project": "vision",
    "output_dir": "elsewhere",
    "strict": True,
    "log_every_n_steps": 7,
    "devices.backend": "simulated",
    "devices.gpus": [0],
    "devices.cpu": True,
    "devices.simulated.num_gpus": 2,
    "devices.simulated.power_model": "model.csv",
    "devices.simulated.base_step_time_s": 0.03,
    "devices.simulated.state_dir": "state",
    "devices.simulated_physics": "ideal",
    "devices.simulated_gpu": "a100",
    "devices.simulated_drive": "steps",
    "monitor.sync_cuda": False,
    "monitor.sample_power": False,
    "monitor.sample_interval_s": 0.2,
    "power_limit.mode": "tune",
    "power_limit.selector": "energy",
    "power_limit.eta": 0.25,
    "power_limit.max_slowdown": 0.2,
    "power_limit.wait_steps": 3,
    "power_limit.warmup_steps": 1,
    "power_limit.profile_steps": 4,
    "power_limit.min_profile_s": 0.5,
    "power_limit.confirm_rounds": 1,
    "power_limit.stop_after_worse": 0,
    "power_limit.step_w": 50.0,
    "power_limit.cap_w": 200.0,
    "power_limit.cap_fraction": 0.7,
    "power_limit.reuse": False,
    "carbon.aware": True,
    "carbon.threshold_g_per_kwh": 200.0,
    "carbon.intensity": "DE",
    "carbon.intensity_csv": "ci.csv",
    "carbon.intensity_g_per_kwh": 250.0,
    "carbon.interval_s": 60.0,
}
#: What a sample needs beside it to be valid.
COMPANIONS: dict[str, list[str]] = {"carbon.aware": ["power_limit.mode=tune", "carbon.intensity_g_per_kwh=300"]}


def text(value: Any) -> str:
    """A value as a dotlist item or an environment variable spells it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def value_at(cfg: EnergyConfig, key: str) -> Any:
    """The value of dotted `key` (e.g. "power_limit.eta") in a loaded config."""
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node
