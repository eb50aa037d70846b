"""A simulated GPU: a first-class device for machines without one (CI, laptops, the demo).

It follows a power model instead of hardware:

- a **power-limit table** `power_limit,time,power`: at each power limit (W), the step time relative to
  the step time at the maximum limit, and the average power (W) while busy; linear in between;
- an **idle power** (W) drawn when no emulated work runs;
- a **clock model**: the supported SM clocks, and time and power against SM frequency. A step's
  compute-bound share scales with `f_max / f`; busy power scales with `(f / f_max) ** 2` above idle.
  With both a power limit and a locked clock, the slower time and the lower power win (the hardware
  throttles to whichever binds first).

Its energy counter integrates the modelled power over real wall time: busy power while emulated work
runs (`busy()` / `run_step()`), idle power otherwise. Changing the power limit or the clock changes what
the emulated work costs, so every decision wattwise makes can be exercised end to end. Every output
derived from it carries `simulated: true` or says "simulated".

Settings can persist in a small JSON state file, so that a process killed with SIGKILL leaves the
changed power limit behind exactly as a real GPU would, and the guard's recovery can be tested. The file
is the GPU's state: reading a setting re-reads it when another process changed it, it is never read or
written through a symbolic link, and a setting that cannot be saved is not changed (a `DeviceError`).
It is read only when it can be trusted (the user's own or root's, the node agent's: `wattwise.safe_files.
read_trusted`) and holds valid settings (`parse_state`); one that fails leaves the GPU at its defaults,
with one warning, and is set aside as `gpuN.json.rejected` when it is the user's own.

The load is shared too, when a node agent serves the simulated GPU: a process driving emulated work adds
the energy it draws above idle to a counter file beside the state file (`publish_load`, after a step, at
most every `PUBLISH_LOAD_S`), and the agent counts that file in its own energy (`count_load`), so its
Prometheus energy counter follows the clients' load, not idle power only.

One module per concern: `models` (the power and clock models, and the CSV table), `presets` (the GPU
generations the realistic physics stands for, each parameter with its source), `physics` (how it departs
from its model), `state` (the state file), `load` (the load shared with a node agent) and `device`
(`SimulatedGPU`). The names here are the package's public ones.
"""

from __future__ import annotations

from wattwise.devices.simulated.device import SimulatedGPU, open_simulated_spec
from wattwise.devices.simulated.load import MAX_LOAD_BYTES, PUBLISH_LOAD_S, load_file_of
from wattwise.devices.simulated.models import MAX_POWER_W, MODEL_RANGES, ClockModel, PowerModel, check_model_value
from wattwise.devices.simulated.physics import PHYSICS_ENV, SEED_ENV, Physics, PhysicsName, seed_from_env
from wattwise.devices.simulated.state import MAX_STATE_BYTES, parse_state

__all__ = [
    "MAX_LOAD_BYTES",
    "MAX_POWER_W",
    "MAX_STATE_BYTES",
    "MODEL_RANGES",
    "PHYSICS_ENV",
    "PUBLISH_LOAD_S",
    "SEED_ENV",
    "ClockModel",
    "Physics",
    "PhysicsName",
    "PowerModel",
    "SimulatedGPU",
    "check_model_value",
    "load_file_of",
    "open_simulated_spec",
    "parse_state",
    "seed_from_env",
]
