"""wattwise core: framework-neutral devices, measurement, decisions, stores, configuration and CLI.

The adapters (`lightning_energy`, `accelerate_energy`) drive one `wattwise.run.Run` per training run.
The package map, one line per package, folder or module (a nested name is relative to the package above
it; the store's Alembic revisions are one folder), from the entry points down to the hardware:

- `__main__`: `python -m wattwise`, the same command line as the `wattwise` script.
- `cli/`: the `wattwise` commands, one module per sub-command (named as the command, `_` for `-`):
    - `main`: the entry point: the table of commands, importing only the one run, one-line errors (exit 2).
    - `run`: `wattwise run -- CMD`: one command with wattwise on, no code changes.
    - `devices`: `wattwise devices`: what was found, why anything is missing, settings left changed.
    - `measure`: `wattwise measure -- CMD`: wall time and energy of a command, per device.
    - `cap`: `wattwise cap --watts W -- CMD`: any command under a GPU power cap, then restored.
    - `demo`: `wattwise demo`: power-limit tuning on the emulated workload and the simulated GPU.
    - `restore`: `wattwise restore`: GPU settings left changed by a process that died, put back.
    - `advise`: `wattwise advise`: when to start a job so it emits, uses or costs least.
    - `report`: `wattwise report RUN_DIR`: facility energy, emissions, cost and an energy statement.
    - `carbon`: `wattwise carbon codes`: the grid intensity codes `--intensity` takes.
    - `runs`: `wattwise runs list|show|compare|forget|add`: the run history.
    - `jobs`: `wattwise jobs list|show|reset|forget-limit|sync`: recurring jobs and their history.
    - `simulate`: `wattwise simulate`: the recurring-job optimizer against real GPU traces.
    - `frontier`: `wattwise frontier`: a pipeline's time-energy frontier from a per-stage profile.
    - `plan`: `wattwise plan`: one frequency plan chosen from a frontier.
    - `dashboard`: `wattwise dashboard`: the local, read-only web page over the run history.
    - `agent`: `wattwise agent serve|status|release`: the node agent.
    - `acceptance`: `wattwise acceptance`: the real-GPU acceptance checks.
    - `example_data`: `wattwise example-data DIR`: the documentation's example inputs, written out.
- `acceptance`: `python -m wattwise.acceptance`, the published command of the real-GPU checks (`tools/`).
- `dashboard/`: the local, read-only web page over the run history (the `dashboard` extra):
    - `history`: what it reads: the store's run history and recurring jobs, and each run's folder.
    - `charts`: its Plotly charts, from what the record, the store and the planner hold.
    - `pages`: its pages, HTML from the Jinja2 templates with those charts.
    - `server`: its web server (aiohttp, GET only).
    - `templates/`: the pages' Jinja2 templates.
- `config`: the typed configuration (OmegaConf structured configs), and where its installed YAML files are.
- `configs/`: those YAML files (`energy.yaml` lists every key; `cap`, `tune`, a LightningCLI config).
- `flags`: the settings read from prefixed environment variables (`LIGHTNING_ENERGY_*`, `ACCELERATE_ENERGY_*`).
- `vocabulary`: the closed sets (`StrEnum`s: run mode, selector, run status, tuner phase...) every layer imports.
- `run/`: one training run and its parts:
    - `run`: the `Run`, composed of the parts below, the boundary that never breaks training.
    - `measurement`: the run's devices, its energy monitor and its windows.
    - `power`: the power-limit part: cap, tune or reuse a limit, through the settings guard.
    - `carbon`: the carbon part: after tuning, follow the grid's carbon intensity between two limits.
    - `recurring`: one run of a recurring job, as both adapters drive it.
    - `agreement`: how the run's processes decide together and what each hands over when they end apart.
    - `logged`: the metrics both adapters log, by name.
    - `drive`: simulated GPUs driven by the training steps themselves.
    - `history`: the end of a run: its folder kept and recorded in the run history.
- `record/`: the run's files:
    - `summary`: `summary.json` (`RunSummary`), typed.
    - `files`: `windows.csv` and `power.csv` rows, writing and reading a run folder.
    - `kept`: every run kept: its own folder under the output folder, and its row for the run history.
    - `report`: a run's energy report: device and facility energy, emissions, cost, settings, savings.
    - `job_report`: a model's energy across all its runs, and its disclosure under the EU AI Act.
    - `plot`: a run's power over time and energy per epoch, as plots.
- `frequency/`: following a frequency plan on a pipeline stage (SM clocks, through the settings guard):
    - `profiler`: each stage's forward and backward measured at each SM frequency (`PipelineProfiler`).
    - `controller`: a stage following its plan instruction by instruction (`FrequencyController`).
- `power_limit`: power-limit tuning, pure: the cost arithmetic, the selectors, the tuning state machine.
- `profile`: `ProfileEntry`, what one power limit cost (shared by the decisions and the record).
- `recurring/`: recurring jobs, pure where it decides:
    - `spec`: what a job is, what one run of it did, what the optimizer recommends.
    - `policy`: the batch-size policy (history in, decision out).
    - `bandit`: Gaussian Thompson sampling arithmetic.
    - `optimizer`: `BatchSizeOptimizer`, what a training integration talks to.
    - `summary`: what a job's history amounts to: counts, totals, per-batch-size figures.
    - `trace`: Zeus's training and power traces, loaded and checked.
    - `simulator`: a recurring job replayed on traces, the real optimizer with clock and GPUs replaced.
- `pipeline/`: the time-energy frontier of a pipeline iteration (Perseus), its solvers and plans, pure:
    - `profiles`: per-stage instruction profiles (the `stage,instruction,frequency,time,energy` CSV).
    - `schedule`: 1F1B and GPipe: the order of each stage's instructions.
    - `dag`: the computation DAG of one iteration.
    - `problem`: a profile laid over a DAG, plus the power a blocked GPU draws.
    - `relaxation`: the convex relaxation, solved for every deadline by parametric min-cost flow.
    - `rounding`: from relaxed solutions to real plans: tracking and polishing.
    - `kernels`: the solver's compiled kernels (`_kernels.c`), and what runs where they are not built.
    - `frontier`: the fast solver, a generator that yields the frontier point by point.
    - `exact`: exact planning of small pipelines with OR-Tools CP-SAT, the yardstick.
    - `segments`: plans a GPU can follow: frequency segments no shorter than its clock-change latency.
    - `plan`: plans and frontiers as data, and choosing a point.
    - `files`: FRONTIER.json, FRONTIER.csv and PLAN.json, written and read back.
    - `plot`: a frontier and one iteration's timeline per stage, plotted.
- `carbon/`: facility and carbon awareness, pure:
    - `series`: PUE, grid carbon intensity and price over time.
    - `grid`: the bundled table of yearly grid carbon intensity, by country and cloud region.
    - `integrate`: facility energy, emissions and cost of IT energy spread over time.
    - `policy`: the carbon-aware power limit: fast when the grid is clean, saving when it is dirty.
    - `advisor`: when to run: the start time that minimises emissions, facility energy or cost.
    - `example`: run folders in the record's format, for tests and the README's example.
- `store/`: the job store and the run history (SQLite or PostgreSQL, on SQLAlchemy):
    - `base`: `JobStore`, the interface every store implements, and the errors all of them raise.
    - `factory`: which store: a path or URL turned into a SQLAlchemy URL and a store.
    - `memory`: `MemoryJobStore`, in dicts, for the simulator and tests.
    - `sql`: `SqlJobStore`, SQLite by default, PostgreSQL by URL.
    - `schema`: the tables, defined once.
    - `history`: one run of the history (`RunRow`), its checks and its rows.
    - `runs`: the run history: every run wattwise measured, one row each.
    - `compare`: how one run of the history differs from another, against the uncertainty.
    - `limits_memory`: remembered power-limit choices, so a job's next run does not profile again.
    - `spool`: results waiting for an unreachable store, kept on disk (`StoreUnavailable`).
    - `migrations/`: the schema's Alembic migrations, applied each time a store is opened:
        - `env`: Alembic's environment script, run on the store's own connection.
        - `versions/`: the revisions, one file each (`v0001_baseline`, ...), each with frozen tables.
- `monitor`: energy measurement in named windows, over any set of devices.
- `distributed`: combining figures across processes with `torch.distributed` (energy summed, time maxed).
- `safe_files`: where wattwise keeps its state, and files written and read back safely.
- `settings/`: changing GPU settings and restoring them on every exit path:
    - `locks`: one holder per GPU among the wattwise processes of a host.
    - `journal`: the settings journal: each changed setting's original, on disk before the change.
    - `apply`: the one way to read, set back and describe a recorded setting.
    - `recovery`: putting back what a dead process left changed, and reporting what is left.
    - `guard`: `SettingsGuard`, through which a training process makes every change.
- `agent/`: the node agent for users who are not root, in layers (`serve` -> `http` -> `agent`):
    - `serve`: `wattwise agent serve`: the Unix socket made, checked and shared, and the agent served.
    - `http`: the aiohttp routes, each request parsed and checked, refusals mapped to statuses.
    - `agent`: `Agent`, the logic: GPUs, leases, journal, audit, with no HTTP in it.
    - `leases`: who holds which GPU and what to put back when the holder goes, pure bookkeeping.
    - `processes`: the processes served, as the kernel shows them: peer credentials, /proc, watchers.
    - `jobs`: the node's record of which GPUs the scheduler gave each job.
    - `cgroups`: the cgroup check of a job's GPUs, off the event loop.
    - `config`: the admin's bounds on what clients may ask.
    - `journal`: where the agent keeps its settings journal, and an older agent's journal read.
    - `audit`: the audit log, one JSON line per setting changed.
    - `connections`: what one client may cost: connections per user, deadlines, a bounded log.
    - `metrics`: the Prometheus metrics, per GPU, per lease and its own.
- `devices/`: the only code that touches hardware:
    - `base`: the one `Device` interface every layer above sees, its spec and its errors.
    - `registry`: the backends by name: how each finds its devices and reopens one from its spec.
    - `nvml`: NVIDIA GPUs through NVML (`pynvml`).
    - `amdsmi`: AMD GPUs through ROCm's AMD SMI (the `amd` extra).
    - `rapl`: CPU energy through RAPL's powercap interface in sysfs.
    - `agent`: the `agent` backend: reads stay local, changes go to the node agent (its typed wire).
    - `simulated/`: the simulated GPU, one module per concern:
        - `models`: what time and power follow at each power limit and SM clock, and their CSV table.
        - `presets`: the GPU generations it can stand for, with each parameter's source.
        - `physics`: how it departs from its model, as a real GPU does.
        - `state`: its state file: its settings, kept on disk as a real GPU keeps them in hardware.
        - `load`: the load shared between processes when a node agent serves it.
        - `device`: `SimulatedGPU`, the `Device` itself.
- `errors`: the errors wattwise raises on purpose, and the warning it gives when it degrades instead.
- `names`: job names, what a user may call a training job.
- `bounds`: physical bounds on every figure a user or a file gives wattwise.
- `readable`: figures as people read them (`value ± uncertainty`, g or kg CO2e, s, min or h), and text tables.
- `project`: the project a run belongs to (the working directory's git root's or folder's name).
- `tracker`: `wattwise.track`, the energy of any code in a `with` block or a decorator, one CSV row a run.
- `extras`: which extra of `pip install 'wattwise[EXTRA]'` brings each optional dependency.
- `copying`: one record made from another by field name: a JSON object from its record, a record from a row.
- `codec`: the one JSON codec: each field of a record or a wire's body defined once, written, validated, read.
- `tools/`: not library code:
    - `acceptance`: the real-GPU acceptance checks and what they record.
    - `checks`: what the checks share: results, outcomes, the context, the load, the Markdown tables.
    - `levers`: the three levers measured against their papers (`wattwise acceptance --levers`).
    - `levers_common`: what the lever checks share: the papers' figures, durations, the tables' words.
    - `levers_figures`: the figures each lever check leaves in `acceptance.json`, typed.
    - `levers_rig`: one model and its training on the GPU under test.
    - `levers_training`: what runs inside the lever checks' Hugging Face Trainer.
    - `levers_cap_sweep`: lever 1, training at caps from the default limit down to the minimum.
    - `levers_tuning`: lever 2, just-in-time power-limit tuning against the sweep's caps.
    - `levers_pipeline`: lever 3, two stages profiled, then `wattwise frontier` and `wattwise plan`.
    - `demo`: what `wattwise demo` trains: the emulated workload on the simulated GPU.
    - `example_data`: the small inputs the documentation uses.
    - `workload`: the emulated workload, a tiny model really trained on the CPU, timed like a GPU job.
- `data/`: the small example inputs that `wattwise example-data` writes out, and the grid intensity table.

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
