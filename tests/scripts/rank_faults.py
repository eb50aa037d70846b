"""How the process of rank 1 differs from the others in the tests of ranks that disagree (no Lightning here).

`make_rank_differ(FAULT, HOME)` makes this process differ as FAULT says, and returns the undo. Imported by
ranks_differ.py (Lightning's DDP) and ranks_differ_accelerate.py (`accelerate launch`), which must not pay
for importing Lightning. FAULT is one of:

- `held`: nothing here; the test holds that GPU from another wattwise process;
- `permission`: every change of its power limit is refused for lack of permission;
- `lost`: the GPU is lost after its first change: every later change, and every read of its energy, fails;
- `refused`: a limit under 250 W is refused by the device;
- `state`: its state folder (the guard's journal) cannot be created;
- `nodevice`: it finds no device to measure (no GPU, no readable CPU counter);
- `nobackend`: its devices cannot be opened, as when the backend is named (`devices.backend: nvml`) and
  its node's driver is missing;
- `sigterm-group`: no difference, but rank 0 sends SIGTERM to the whole process group after optimizer
  step 6, as SLURM's `scancel` does (run the script in a session of its own;
  tests/integration/lightning_energy/test_preemption.py; Lightning ends the processes there, so it is the
  last fit).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import wattwise.run.measurement
from wattwise.devices import Discovery
from wattwise.devices.base import DeviceError, DeviceLostError, NoPermissionError, NotSupportedError
from wattwise.devices.simulated import SimulatedGPU


def make_rank_differ(fault: str, home: Path) -> Callable[[], None]:
    """Make this process (rank 1) differ as `fault` says (see the module docstring); returns the undo."""
    original, energy_j = SimulatedGPU.set_power_limit_w, SimulatedGPU.energy_j
    discover = wattwise.run.measurement.discover
    wattwise_home = os.environ.get("WATTWISE_HOME")
    changes = []

    def set_power_limit_w(gpu: SimulatedGPU, watts: float) -> None:
        changes.append(watts)
        if fault == "permission":
            raise NoPermissionError(f"gpu{gpu.index}: insufficient permissions to set the power limit")
        if fault == "lost" and len(changes) > 1:
            raise DeviceLostError(f"gpu{gpu.index}: the GPU has fallen off the bus")
        if fault == "refused" and watts < 250:
            raise DeviceError(f"gpu{gpu.index}: the driver refused a power limit of {watts:g} W")
        original(gpu, watts)

    def lost_energy_j(gpu: SimulatedGPU) -> float:
        if len(changes) > 1:
            raise DeviceLostError(f"gpu{gpu.index}: the GPU has fallen off the bus")
        return energy_j(gpu)

    SimulatedGPU.set_power_limit_w = set_power_limit_w  # type: ignore[method-assign]
    if fault == "lost":
        SimulatedGPU.energy_j = lost_energy_j  # type: ignore[method-assign]
    if fault == "nodevice":
        wattwise.run.measurement.discover = lambda *args, **kwargs: Discovery(notes=["no GPU found"])
    if fault == "nobackend":
        wattwise.run.measurement.discover = no_driver
    if fault == "state":
        blocker = home / "not-a-folder"
        blocker.write_text("a file where the state folder should be\n")
        os.environ["WATTWISE_HOME"] = str(blocker / "wattwise")

    def undo() -> None:
        SimulatedGPU.set_power_limit_w = original  # type: ignore[method-assign]
        SimulatedGPU.energy_j = energy_j  # type: ignore[method-assign]
        wattwise.run.measurement.discover = discover
        if wattwise_home is not None:
            os.environ["WATTWISE_HOME"] = wattwise_home

    return undo


def no_driver(*args: object, **kwargs: object) -> Discovery:
    """`discover` on a node whose NVIDIA driver is missing, with `devices.backend: nvml`."""
    raise NotSupportedError(
        "NVML unavailable: NVML Shared Library Not Found; devices.backend is nvml, which needs "
        "an NVIDIA driver (use auto, or simulated to try wattwise without one)"
    )
