"""A fake powercap sysfs tree for the RAPL backend's tests (laid out as the kernel lays it out)."""

from __future__ import annotations

from pathlib import Path

#: Intel's usual `max_energy_range_uj` (a 32-bit counter in 61 µJ units).
INTEL_RANGE_UJ = 262_143_328_850


class FakePowercap:
    """A powercap tree laid out like the kernel's: zone directories nest under
    `devices/virtual/powercap/<control type>/`, and `class/powercap` holds a symlink to every zone."""

    def __init__(self, base: Path) -> None:
        self.root = base / "class" / "powercap"
        self.devices = base / "devices" / "virtual" / "powercap"
        self.root.mkdir(parents=True)
        self._ranges_uj: dict[str, int] = {}

    def add_control_type(self, control: str) -> None:
        (self.devices / control).mkdir(parents=True)
        (self.devices / control / "enabled").write_text("1\n")
        (self.root / control).symlink_to(self.devices / control)

    def add_zone(self, zone: str, name: str, energy_uj: int = 0, max_energy_range_uj: int = INTEL_RANGE_UJ) -> None:
        control, *numbers = zone.split(":")
        path = self.devices / control  # e.g. .../intel-rapl/intel-rapl:0/intel-rapl:0:1
        for depth in range(1, len(numbers) + 1):
            path = path / ":".join([control, *numbers[:depth]])
        path.mkdir(parents=True)
        (path / "name").write_text(f"{name}\n")
        (path / "max_energy_range_uj").write_text(f"{max_energy_range_uj}\n")
        (self.root / zone).symlink_to(path)
        self._ranges_uj[zone] = max_energy_range_uj
        self.set_energy(zone, energy_uj)

    def set_energy(self, zone: str, energy_uj: int) -> None:
        (self.root / zone / "energy_uj").write_text(f"{energy_uj}\n")

    def add_energy(self, zone: str, joules: float) -> None:
        """Count `joules` more, wrapping at the zone's range as the hardware counter does."""
        current_uj = int((self.root / zone / "energy_uj").read_text())
        self.set_energy(zone, (current_uj + round(joules * 1e6)) % self._ranges_uj[zone])
