"""wattwise core: framework-neutral devices, measurement, decisions, stores, configuration and CLI.

The adapters (`lightning_energy`, `accelerate_energy`) drive one `wattwise.run.Run` per training run.
The package map, one line per subpackage or module, from the entry points down to the hardware:

- `cli/`: the `wattwise` commands, one module per sub-command.
- `__main__`: `python -m wattwise`, the same command line as the `wattwise` script.
- `acceptance`: `python -m wattwise.acceptance`, the published command of the real-GPU checks (`tools/`).
- `config`: the typed configuration (OmegaConf structured configs), and where its installed YAML files are.
- `configs/`: those YAML files (`energy.yaml` lists every key; `cap`, `tune`, a LightningCLI config).
- `flags`: the settings read from prefixed environment variables (`LIGHTNING_ENERGY_*`, `ACCELERATE_ENERGY_*`).
- `run/`: one training run and its parts: `run` (the `Run`), `measurement`, `power` (cap, tune, reuse a
  limit), `carbon`, `recurring` (one run of a recurring job), `agreement` (how its processes decide
  together and end apart), `logged` (the metrics both adapters log).
- `record/`: the run's files: `summary` (summary.json), `fields` (its codec), `files` (windows.csv,
  power.csv, a run folder), `report` (reports, energy statements), `plot`.
- `frequency/`: following a frequency plan on a pipeline stage (SM clocks, through the settings guard).
- `power_limit`: power-limit tuning, pure: the cost arithmetic, the selectors, the tuning state machine.
- `profile`: `ProfileEntry`, what one power limit cost (shared by the decisions and the record).
- `recurring/`: recurring jobs, pure: the batch-size and power-limit bandit, its policy and optimizer.
- `pipeline/`: the time-energy frontier of a pipeline iteration (Perseus), its solvers and plans, pure.
- `carbon/`: facility and carbon awareness, pure: intensity, PUE, price, when to run.
- `store/`: the job store (SQLite or PostgreSQL, migrations, spool, remembered limits).
- `monitor`: energy measurement in named windows, over any set of devices.
- `distributed`: combining figures across processes with `torch.distributed` (energy summed, time maxed).
- `safe_files`: where wattwise keeps its state, and files written and read back safely.
- `settings/`: changing GPU settings and restoring them on every exit path (locks, journal, guard).
- `agent/`: the node agent for users who are not root (`processes`, `agent`, `http`, `serve`, `wire`).
- `devices/`: the only code that touches hardware (NVML, amdsmi, RAPL, the simulated GPU, the agent);
  `devices/simulated/`: the simulated GPU, one module per concern (`models`, `presets`, `physics`, `state`, `load`,
  `device`).
- `errors`: the errors wattwise raises on purpose, and the warning it gives when it degrades instead.
- `names`: job names, what a user may call a training job.
- `bounds`: physical bounds on every figure a user or a file gives wattwise.
- `readable`: figures as people read them (`value ± uncertainty`, g or kg CO2e, s, min or h).
- `project`: the project a run belongs to (the working directory's git root's or folder's name).
- `tracker`: `wattwise.track`, the energy of any code in a `with` block or a decorator, one CSV row a run.
- `extras`: which extra of `pip install 'wattwise[EXTRA]'` brings each optional dependency.
- `tools/`: not library code: the acceptance checks, the demo, example data, the emulated workload.
- `data/`: the small example inputs that `wattwise example-data` writes out.

wattwise logs under the `wattwise` logger with a `NullHandler` only, as the Python logging HOWTO asks of a
library: an application that configures no logging hears nothing from it. What a user must see (a GPU
setting that could not be restored, a file set aside, a degraded run) is an `EnergyPluginWarning`
(`wattwise.errors.plugin_warning`), which Python prints whatever the logging configuration.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0.dev0"

logging.getLogger("wattwise").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from wattwise.tracker import track as track


def __getattr__(name: str) -> Any:
    """`wattwise.track`, imported when first used: `import wattwise` stays cheap for the command line."""
    if name == "track":
        from wattwise.tracker import track

        return track
    raise AttributeError(f"module 'wattwise' has no attribute {name!r}")
