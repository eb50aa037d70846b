"""The one way to set, read and describe a recorded GPU setting, for the guard, recovery and the agent."""

from __future__ import annotations

import math
from typing import Any

from wattwise.devices.base import Device, DeviceError, DeviceSpec
from wattwise.vocabulary import SettingName

#: The settings a journal records, by the name of the `Device` method that reads them (`SettingName`), as
#: plain strings: the journal's keys.
POWER_LIMIT = SettingName.POWER_LIMIT.value
SM_CLOCKS = SettingName.SM_CLOCKS.value
WORKLOAD_PROFILES = SettingName.WORKLOAD_PROFILES.value

#: A recorded setting's value: watts (a power limit), `[min, max]` MHz or None (locked clocks: None is
#: unlocked), the names of the workload power profiles requested.
SettingValue = float | list[int] | list[str] | None
#: One device's recorded settings by name (`POWER_LIMIT`, `SM_CLOCKS`, `WORKLOAD_PROFILES`), in the order recorded.
Settings = dict[str, SettingValue]

#: Errors a restore reports instead of raising (a device that refuses, a state file that cannot be written).
RESTORE_ERRORS = (DeviceError, ValueError, TypeError, OSError)


def finite_number(value: Any) -> bool:
    """`value` is an int or float (not a bool), and finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def apply_setting(device: Device, setting: str, value: Any) -> None:
    """Set `setting` on `device` to a recorded `value`.

    Watts for a power limit; [min, max] MHz, or None for unlocked clocks; a list of workload power profile
    names (empty: none requested).

    Raises:
        DeviceError: the device refuses, or `setting` is not one a journal records.
    """
    if setting == POWER_LIMIT:
        device.set_power_limit_w(float(value))
    elif setting == SM_CLOCKS:
        if value is None:
            device.reset_sm_clocks()
        else:
            device.lock_sm_clocks_mhz(int(value[0]), int(value[1]))
    elif setting == WORKLOAD_PROFILES:
        device.request_workload_power_profiles([str(name) for name in value])
    else:
        raise DeviceError(f"unknown setting {setting!r} in the journal")


def read_setting(device: Device, setting: str) -> SettingValue:
    """The value of `setting` on `device` now, as a journal records it (watts; [min, max] MHz or None).

    Raises:
        DeviceError: the device cannot read it (NotSupportedError: it has no such setting).
    """
    if setting == POWER_LIMIT:
        return device.power_limit_w()
    if setting == SM_CLOCKS:
        clocks = device.locked_sm_clocks_mhz()
        return None if clocks is None else [int(clocks[0]), int(clocks[1])]
    if setting == WORKLOAD_PROFILES:
        return sorted(device.requested_workload_power_profiles())
    raise DeviceError(f"unknown setting {setting!r}")


def restore_originals(device: Device, originals: Settings) -> None:
    """Set every recorded original of `device` back (`{setting: value}`), in the order recorded.

    Raises:
        DeviceError: the device refuses one; the settings after it are not tried.
    """
    for setting, value in originals.items():
        apply_setting(device, setting, value)


def describe(spec: DeviceSpec, setting: str, value: Any) -> str:
    """One line naming a device, a setting and the value it gets back (for restore reports)."""
    return f"{spec.get('backend')} device {spec.get('index')}: {setting} -> {value}"


def setting_words(setting: str, value: Any) -> str:
    """A setting's value as a person reads it: "power limit 250 W", "SM clocks unlocked"."""
    if setting == POWER_LIMIT:
        return f"power limit {value:g} W" if finite_number(value) else f"power limit {value}"
    if setting == WORKLOAD_PROFILES:
        return f"workload power profiles {', '.join(value)} requested" if value else "no workload power profile"
    if value is None:
        return "SM clocks unlocked"
    return f"SM clocks locked at {value[0]}-{value[1]} MHz"


def originals_words(originals: Settings) -> str:
    """Recorded originals as a person reads them: "power limit 300 W, SM clocks unlocked"."""
    return ", ".join(setting_words(setting, value) for setting, value in originals.items()) or "nothing recorded"
