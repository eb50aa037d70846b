"""wattwise core: framework-neutral devices, measurement, decisions, stores, configuration and CLI.

The adapters (`lightning_energy`, `accelerate_energy`) drive one `wattwise.run.Run` per training run.
The package map, from the run down to the hardware:

- `run/`: one training run and its parts: `run` (the `Run`), `measurement`, `power` (cap, tune, reuse a
  limit), `carbon`, `recurring` (one run of a recurring job), `agreement` (how its processes decide
  together and end apart), `logged` (the metrics both adapters log).
- `record/`: the run's files: `summary` (summary.json), `fields` (its codec), `files` (windows.csv,
  power.csv, a run folder), `report` (reports, energy statements), `plot`.
- `cli/`: the `wattwise` commands; `config`: the typed configuration (OmegaConf structured configs).
- Decisions, pure: `power_limit` (tuning), `profile` (what a limit cost), `recurring/` (the batch-size
  and power-limit bandit), `pipeline/` (the time-energy frontier of a pipeline iteration), `carbon/`
  (intensity, PUE, when to run), `frequency/` (following a frequency plan on a pipeline stage).
- `store/`: the job store (SQLite or PostgreSQL, migrations, spool, remembered limits).
- `monitor` (measurement windows), `distributed` (collectives), `safe_files` (files written and read
  back safely), `errors`, `names`, `bounds`, `flags`, `extras`.
- `settings/`: changing GPU settings and restoring them on every exit path (locks, journal, guard).
- `agent/`: the node agent for users who are not root (`processes`, `agent`, `http`, `serve`, `wire`).
- `devices/`: the only code that touches hardware (NVML, amdsmi, RAPL, the simulated GPU, the agent).
- `tools/`: not library code: the acceptance checks, the demo, example data, the emulated workload.

wattwise logs under the `wattwise` logger and attaches no handler to it. It adds no `NullHandler` either,
for now: a record at WARNING or above says what a user must see (a GPU setting that could not be
restored), and Python prints it through its last-resort handler only while no handler is attached.
"""

__version__ = "0.1.0"
