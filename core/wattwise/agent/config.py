"""The admin's bounds on what clients may ask the agent (`wattwise agent serve --config FILE`).

YAML, every key optional:

    allowed_users: [alice, 1001]      # names or uids; with allowed_groups: anyone in either may change
    allowed_groups: [gpu-users]       # names or gids (primary or supplementary group of the caller)
    power_limits:                     # first entry whose `model` is in the GPU's name (case-insensitive)
      - {model: "A100", floor_w: 200, ceiling_w: 400}
    sm_clock_mhz: [900, 1980]         # the clock range clients may lock to
    allocation: registered            # none | registered | cgroup: what a user with no job registered may change
    registration_ttl_s: 604800        # a job's registration lapses after this unless the epilog ends it first

Without allowed users and groups, anyone who can open the socket may change settings (the socket's
group and mode are then the access control). Root may always.
"""

from __future__ import annotations

import grp
import math
import os
import pwd
from dataclasses import dataclass, field
from typing import Any

import yaml

from wattwise.errors import ConfigError
from wattwise.vocabulary import AllocationPolicy

#: What a user with no job registered on the node may change (`allocation`, an `AllocationPolicy`): any
#: free GPU (`none`, the default: no scheduler tells the agent who was given what), nothing (`registered`:
#: every job is registered by the SLURM prolog), or the GPUs the caller's device cgroup lets it open
#: (`cgroup`: what a container runtime or SLURM's ConstrainDevices gave it, `wattwise.agent.cgroups`). A
#: user with a job registered may change only that job's GPUs, whatever the policy.
KEYS = ("allowed_users", "allowed_groups", "power_limits", "sm_clock_mhz", "allocation", "registration_ttl_s")
#: How long a job's registration lasts unless the epilog ends it first: a week, longer than a batch job runs.
DEFAULT_REGISTRATION_TTL_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class ModelBounds:
    """Power-limit floor and ceiling (W) for GPUs whose name contains `model`."""

    model: str
    floor_w: float | None = None
    ceiling_w: float | None = None


@dataclass(frozen=True)
class AgentConfig:
    """The admin's bounds (`--config`), checked on every change a client asks for.

    Who may change GPU settings, the power-limit floor and ceiling per GPU model, and the SM clock range
    clients may lock to. The defaults allow anyone, within the GPU's own range.
    """

    allowed_uids: frozenset[int] = field(default_factory=frozenset)
    allowed_gids: frozenset[int] = field(default_factory=frozenset)
    power_limits: tuple[ModelBounds, ...] = ()
    sm_clock_mhz: tuple[int, int] | None = None
    #: What a user with no job registered may change: any free GPU, nothing, or the GPUs its device
    #: cgroup lets it open.
    allocation: AllocationPolicy = AllocationPolicy.NONE
    #: Seconds a job's registration lasts unless the epilog ends it first (set it above the longest job).
    registration_ttl_s: float = DEFAULT_REGISTRATION_TTL_S

    def allows(self, uid: int, gids: set[int]) -> bool:
        """May this caller change settings? Root always; anyone when no users or groups are listed."""
        if uid == 0 or not (self.allowed_uids or self.allowed_gids):
            return True
        return uid in self.allowed_uids or bool(gids & self.allowed_gids)

    def power_bounds(self, gpu_name: str) -> tuple[float | None, float | None]:
        """(floor, ceiling) in W for a GPU model; None where the admin sets none."""
        for bounds in self.power_limits:
            if bounds.model.lower() in gpu_name.lower():
                return bounds.floor_w, bounds.ceiling_w
        return None, None


def load_config(path: str | os.PathLike[str] | None) -> AgentConfig:
    """Read and check the config file; no file: no bounds beyond the GPU's own."""
    if path is None:
        return AgentConfig()
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as err:
        raise ConfigError(f"agent config {path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"agent config {path}: not UTF-8 text (byte {err.start}); give the YAML file") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"agent config {path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse_config(data, str(path))


def parse_config(data: Any, where: str = "agent config") -> AgentConfig:
    """Check the config file's content key by key and turn it into an `AgentConfig`.

    Args:
        data: The parsed YAML.
        where: How errors name the file.

    Returns:
        The bounds, user and group names resolved to ids.

    Raises:
        ConfigError: A key is unknown or a value wrong; the message names the key and what it must be.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(KEYS)}")
    uids = frozenset(_ids(data.get("allowed_users"), pwd.getpwnam, "pw_uid", f"{where}: allowed_users"))
    gids = frozenset(_ids(data.get("allowed_groups"), grp.getgrnam, "gr_gid", f"{where}: allowed_groups"))
    limits = tuple(
        _model_bounds(item, f"{where}: power_limits[{i}]")
        for i, item in enumerate(_list(data.get("power_limits"), f"{where}: power_limits"))
    )
    clocks = data.get("sm_clock_mhz")
    clock_range = None
    if clocks is not None:
        if not (
            isinstance(clocks, list)
            and len(clocks) == 2
            and all(_is_int(c) and c > 0 for c in clocks)
            and clocks[0] <= clocks[1]
        ):
            raise ConfigError(f"{where}: sm_clock_mhz must be [min, max] in MHz, min <= max (got {clocks!r})")
        clock_range = (int(clocks[0]), int(clocks[1]))
    allocation = data.get("allocation", AllocationPolicy.NONE.value)
    policies = [policy.value for policy in AllocationPolicy]
    if allocation not in policies:
        raise ConfigError(f"{where}: allocation must be one of {', '.join(policies)} (got {allocation!r})")
    ttl = data.get("registration_ttl_s", DEFAULT_REGISTRATION_TTL_S)
    if not (_is_number(ttl) and math.isfinite(ttl) and ttl > 0):
        raise ConfigError(
            f"{where}: registration_ttl_s must be a positive number of seconds, longer than the longest "
            f"job (got {ttl!r})"
        )
    return AgentConfig(uids, gids, limits, clock_range, AllocationPolicy(allocation), float(ttl))


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list (got {value!r})")
    return value


def _ids(value: Any, lookup: Any, attr: str, where: str) -> list[int]:
    ids = []
    for item in _list(value, where):
        if _is_int(item) and item >= 0:
            ids.append(int(item))
        elif isinstance(item, str):
            try:
                ids.append(int(getattr(lookup(item), attr)))
            except KeyError:
                raise ConfigError(f"{where}: no such name {item!r} on this machine") from None
        else:
            raise ConfigError(f"{where}: {item!r} is neither a name nor a number")
    return ids


def _model_bounds(item: Any, where: str) -> ModelBounds:
    if not isinstance(item, dict) or not isinstance(item.get("model"), str) or not item["model"]:
        raise ConfigError(f"{where}: needs `model` (a part of the GPU's name), `floor_w` and/or `ceiling_w`")
    unknown = sorted(set(item) - {"model", "floor_w", "ceiling_w"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    values = []
    for key in ("floor_w", "ceiling_w"):
        v = item.get(key)
        if v is not None and not (_is_number(v) and math.isfinite(v) and v > 0):
            raise ConfigError(f"{where}: {key} must be a positive number of watts (got {v!r})")
        values.append(None if v is None else float(v))
    if values[0] is not None and values[1] is not None and values[0] > values[1]:
        raise ConfigError(f"{where}: floor_w {values[0]:g} W is above ceiling_w {values[1]:g} W")
    return ModelBounds(item["model"], values[0], values[1])


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
