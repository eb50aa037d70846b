"""Generate the site's reference pages from the code, at build time (run by mkdocs-gen-files).

- `reference/api/`: one page per package, one `::: module` block per module found in the package tree now,
  so a module that moves or appears is documented where it is, and none is listed by hand.
- `reference/cli.md`: every `wattwise` command and sub-command, its help as the parser prints it.
- `reference/configuration.md`: every configuration key (the config dataclasses, their defaults and
  comments), the settings given by name (`wattwise.config.SETTINGS`) with their environment variables
  and flags, and the other environment variables.

It is also importable (`tests` check the environment-variable table against the code).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import os
import re
import typing
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source roots and the packages documented in the API reference, in the order of the index: the adapters a
#: user imports first, then the core they are built on.
PACKAGES = ((".", "lightning_energy"), (".", "accelerate_energy"), ("core", "wattwise"))
#: Folders inside the packages that hold no API (generated migration scripts).
SKIPPED = ("migrations",)

#: Environment variables other than the settings' `<PREFIX>_<NAME>` ones: name -> what it does.
ENVIRONMENT: dict[str, str] = {
    "ACCELERATE_ENERGY": "`1`/`true`/`yes`/`on` turns wattwise on in every `Accelerator` (no code change); "
    "anything else set under the prefix is ignored while it is off",
    "LIGHTNING_ENERGY": "`1`/`true`/`yes`/`on` adds an `EnergyCallback` to every Lightning `Trainer`",
    "ACCELERATE_ENERGY_CONFIG, LIGHTNING_ENERGY_CONFIG": "an OmegaConf YAML with any configuration key "
    "(a path, or the name of an installed configuration such as `tune.yaml`)",
    "ACCELERATE_ENERGY_OVERRIDES, LIGHTNING_ENERGY_OVERRIDES": "space-separated dotlist applied last, e.g. "
    '`"power_limit.profile_steps=10 devices.gpus=[0]"`',
    "WATTWISE_BACKEND": "`auto`, `nvml`, `simulated` or `agent`: the device backend `auto` stands for, for the "
    "callback, the Accelerate plugin and the CLI at once (a backend given explicitly wins)",
    "WATTWISE_HOME": "the state directory: settings journals, the default job store, the simulated GPUs' "
    "state (default `$XDG_STATE_HOME/wattwise`, else `~/.local/state/wattwise`)",
    "WATTWISE_STORE": "the job store: a SQLite path or a `postgresql://` URL (default `jobs.sqlite` in the "
    "state directory)",
    "WATTWISE_DASHBOARD_TOKEN": "`wattwise dashboard`'s `--token` when not given: the token every request must "
    "carry (default: a new random one each start, in the printed URL)",
    "WATTWISE_INTENSITY": "`wattwise report`'s `--intensity` when not given: gCO2e/kWh, a CSV series, or a code "
    "of the bundled table of yearly averages (`DE`, `gcp:europe-west1`)",
    "WATTWISE_SIMULATED_PHYSICS": "`realistic` (default: a counter that advances in steps, reads that take time, "
    "settings that settle, noise) or `ideal` (exact figures): the simulated GPU's physics for every entry point "
    "at once (`devices.simulated_physics` wins)",
    "WATTWISE_SIMULATED_SEED": "an integer that fixes the realistic simulated GPU's noise (unset: each run differs)",
    "WATTWISE_SIMULATED_GPU": (
        "`h100`, `a100`, `v100` or `mi300x`: the GPU generation the realistic simulated GPU stands for (unset: h100)"
    ),
    "WATTWISE_SIMULATED_TEMPERATURE": (
        "`on`: the realistic simulated GPU warms under load and needs more power (unset: off)"
    ),
    "WATTWISE_RUN_COMMAND": 'set to `1` by `wattwise run` for its command: a run inside it leaves "nothing to '
    "measure on this machine\" to `wattwise run`'s last line",
    "WATTWISE_AGENT_SOCKET": "the node agent's Unix socket (default `/run/wattwise/agent.sock`)",
    "WATTWISE_POLICY": "the recurring-job policy (`wattwise`, or `zeus` for Zeus's published one)",
    "WATTWISE_THREADS": "the most threads the frontier solver uses (default: every CPU the process may run on)",
    "WATTWISE_KERNELS": "`0` makes the frontier solver use numpy and scipy instead of its compiled kernels "
    "(same plans, 3-5x slower; for comparison)",
    "WATTWISE_SHARED_DATA": "where the test suite and the benchmarks find the full measured traces and "
    "profiles (default `../shared/data` beside the checkout); tests that need them skip, saying so, "
    "when they are absent",
}


#: Front matter of the wide reference pages (the command help's columns, the tables of keys): Material hides
#: the site navigation there, which leaves the content the width of a 100-column help text at 1280 px.
WIDE_PAGE = ("---", "hide:", "  - navigation", "---", "")


def modules_of(package: str, source_root: str) -> dict[str, list[str]]:
    """Every public module of `package` under `source_root`, grouped by the package that holds it."""
    base = ROOT / source_root
    groups: dict[str, list[str]] = {}
    for path in sorted((base / package).rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if any(p.startswith("_") and p != "__init__" for p in parts) or any(s in parts for s in SKIPPED):
            continue
        if parts[-1] == "__init__":
            name = ".".join(parts[:-1])
            groups.setdefault(name, []).insert(0, name)
        else:
            groups.setdefault(".".join(parts[:-1]), []).append(".".join(parts))
    return groups


#: What each API page opens with: a one-line description (the index lists it) and the main objects, shown first.
#: A package left out here is described by the first sentence of its docstring, with no object put first.
MAIN: dict[str, tuple[str, tuple[str, ...]]] = {
    "lightning_energy": (
        "PyTorch Lightning: `EnergyCallback` measures, caps or tunes a run; recurring batch sizes; "
        "pipeline frequency plans.",
        (
            "lightning_energy.callback.EnergyCallback",
            "lightning_energy.batch_size.RecurringBatchSizeCallback",
            "lightning_energy.pipeline.PipelineFrequencyCallback",
        ),
    ),
    "accelerate_energy": (
        "Hugging Face Accelerate and Trainer: `EnergyPlugin`, `attach`, `EnergyTrainerCallback`.",
        (
            "accelerate_energy.plugin.EnergyPlugin",
            "accelerate_energy.adapter.attach",
            "accelerate_energy.hf_trainer.EnergyTrainerCallback",
        ),
    ),
    "wattwise": (
        "The framework-neutral core: the configuration, energy measurement in windows, errors and bounds.",
        ("wattwise.config.EnergyConfig", "wattwise.monitor.EnergyMonitor"),
    ),
    "wattwise.run": ("One training run, as both adapters drive it: `Run`.", ("wattwise.run.run.Run",)),
    "wattwise.devices": (
        "The only code that touches hardware: `Device` and its NVML, amdsmi, RAPL, simulated and agent backends.",
        ("wattwise.devices.base.Device",),
    ),
    "wattwise.record": (
        "The run's files: `RunSummary` (summary.json), windows.csv, power.csv, reports, statements, plots.",
        ("wattwise.record.summary.RunSummary",),
    ),
    "wattwise.store": (
        "Where history is kept (SQLite or PostgreSQL): `JobStore`, remembered limits, the spool.",
        ("wattwise.store.base.JobStore",),
    ),
    "wattwise.recurring": (
        "Recurring jobs: `BatchSizeOptimizer` chooses each run's batch size and power limit.",
        ("wattwise.recurring.optimizer.BatchSizeOptimizer",),
    ),
    "wattwise.pipeline": (
        "Pipeline frequency planning (Perseus): `PipelineProfile`, the time-energy `Frontier` and its plans.",
        ("wattwise.pipeline.profiles.PipelineProfile", "wattwise.pipeline.plan.Frontier"),
    ),
    "wattwise.frequency": (
        "Following a frequency plan on a pipeline stage: `FrequencyController`.",
        ("wattwise.frequency.controller.FrequencyController",),
    ),
    "wattwise.settings": (
        "Changing GPU settings and restoring them on every exit path: `SettingsGuard`.",
        ("wattwise.settings.guard.SettingsGuard",),
    ),
    "wattwise.carbon": (
        "Facility and carbon awareness: PUE, grid carbon intensity (`GridIntensity`), price, when to run.",
        ("wattwise.carbon.grid.GridIntensity",),
    ),
    "wattwise.agent": (
        "The node agent, for users who are not root: `Agent` and its leases.",
        ("wattwise.agent.agent.Agent",),
    ),
    "wattwise.dashboard": (
        "The local, read-only dashboard over the run history (`wattwise dashboard`): `History`, what it reads.",
        ("wattwise.dashboard.history.History",),
    ),
    "wattwise.cli": (
        "The `wattwise` command line, one module per command (their help: the command-line reference).",
        (),
    ),
}


def _defined(path: str, source_root: str) -> bool:
    """Whether `path` (module.Name) names a class or function defined at the top of its module's file."""
    module, _, name = path.rpartition(".")
    file = ROOT / source_root / Path(*module.split(".")).with_suffix(".py")
    text = file.read_text(encoding="utf-8") if file.is_file() else ""
    return re.search(rf"^(class|def) {re.escape(name)}\b", text, re.MULTILINE) is not None


def _first_sentence(package: str, source_root: str) -> str:
    """The first sentence of a package's docstring (its one-line description when `MAIN` has none)."""
    init = ROOT / source_root / Path(*package.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) if init.is_file() else None
    first = " ".join((doc or "").split("\n\n")[0].split())
    return first.split(". ")[0].rstrip(".") + "." if first else ""


def _block(path: str, *, hidden: tuple[str, ...] = ()) -> list[str]:
    """A `:::` block of mkdocstrings; `hidden` names are left out (they are shown earlier on the page)."""
    lines = [f"::: {path}", "    options:", "      show_submodules: false"]
    if hidden:
        filters = ", ".join(f'"{f}"' for f in ["!^_", *(f"!^{name}$" for name in hidden)])
        lines.append(f"      filters: [{filters}]")
    return [*lines, ""]


def api_pages() -> Iterator[tuple[str, str]]:
    """(path, markdown) of each API page and of the API index.

    Each page opens with its one-line description and its main objects (`MAIN`), then every module of the
    package with what it defines (the main objects, already shown, left out).
    """
    index = [
        "# API reference",
        "",
        "Generated from the docstrings of the code, one page per package. Start with `lightning_energy` "
        "(`EnergyCallback`) or `accelerate_energy` (`EnergyPlugin`): the rest is what they are built on.",
        "",
        "| package | what it is |",
        "|---|---|",
    ]
    for source_root, package in PACKAGES:
        for group, modules in sorted(modules_of(package, source_root).items(), key=lambda g: g[0]):
            description, main = MAIN.get(group, (_first_sentence(group, source_root), ()))
            main = tuple(m for m in main if _defined(m, source_root))
            body = [f"# `{group}`", "", description, ""]
            for path in main:
                body += _block(path)
            if main:
                body += ["## Modules", ""]
            for module in modules:
                # Shown above: left out of the module that defines it and of the package that re-exports it.
                shown = tuple(m.rpartition(".")[2] for m in main if module in (group, m.rpartition(".")[0]))
                body += _block(module, hidden=shown)
            yield f"reference/api/{group}.md", "\n".join(body)
            index.append(f"| [`{group}`]({group}.md) | {description} |")
    yield "reference/api/index.md", "\n".join(index) + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _help_of(parser: argparse.ArgumentParser) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        parser.print_help()
    return out.getvalue().rstrip()


def cli_page() -> str:
    """Every command's help, as `wattwise COMMAND --help` prints it."""
    from wattwise.cli.main import build_parser

    os.environ["COLUMNS"] = "100"
    parser = build_parser()
    lines = [
        *WIDE_PAGE,
        "# Command-line reference",
        "",
        "Every `wattwise` command, its help exactly as `wattwise COMMAND --help` prints it "
        "(generated from the parser).",
        "",
        "```text",
        _help_of(parser),
        "```",
        "",
    ]

    def walk(prefix: str, p: argparse.ArgumentParser, depth: int) -> None:
        for name, sub in _subcommands(p):
            title = f"{prefix} {name}"
            lines.extend([f"{'#' * depth} `{title}`", "", "```text", _help_of(sub), "```", ""])
            walk(title, sub, depth + 1)

    walk("wattwise", parser, 2)
    return "\n".join(lines)


def _comments(cls: type) -> dict[str, str]:
    """The `#:` comment lines above each field of a config dataclass."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        text = line.strip()
        if text.startswith("#:"):
            pending.append(text[2:].strip())
            continue
        match = re.match(r"(\w+)\s*:", text)
        if match and pending:
            found[match.group(1)] = " ".join(pending)
        pending = []
    return found


def _plain(text: str) -> str:
    """`text` for a Markdown table cell: an asterisk outside a code span is an asterisk (`eta*E`), not emphasis."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("*", "\\*") for i, part in enumerate(parts))


def _rows(cls: type, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    hints = typing.get_type_hints(cls)
    notes = _comments(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _rows(typing.cast(type, kind), f"{prefix}{f.name}.")
        else:
            default = f.default if f.default is not dataclasses.MISSING else None
            yield f"{prefix}{f.name}", f"`{default!r}`".replace("|", "\\|"), _plain(notes.get(f.name, ""))


def configuration_page() -> str:
    """Every configuration key, the settings given by name, and the environment variables."""
    from wattwise.config import SETTINGS, EnergyConfig

    lines = [
        *WIDE_PAGE,
        "# Configuration reference",
        "",
        "Generated from the code: the configuration dataclasses of `wattwise.config` (defaults and their "
        "comments) and its `SETTINGS` table.",
        "",
        "## Every key",
        "",
        "Reach any key with a YAML file (`config=` of `EnergyCallback`, `ACCELERATE_ENERGY_CONFIG`, "
        '`wattwise run --config`) or a dotlist override (`overrides=["power_limit.eta=0.3"]`, '
        "`ACCELERATE_ENERGY_OVERRIDES`, `wattwise run --override KEY=VALUE`). An unknown key, a wrong "
        "type or a bad value is an error naming the key.",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{key}` | {default} | {note} |" for key, default, note in _rows(EnergyConfig)]
    lines += [
        "",
        "## Settings given by name",
        "",
        "Each is a keyword of `EnergyCallback`, a field of `EnergyPlugin`, an environment variable "
        "under both prefixes, and an option of `wattwise run`.",
        "",
        "| name | key | environment variables | `wattwise run` | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        env = f"`ACCELERATE_ENERGY_{s.name.upper()}`, `LIGHTNING_ENERGY_{s.name.upper()}`"
        flag = "--" + s.name.replace("_", "-")
        lines.append(f"| `{s.name}` | `{s.key}` | {env} | `{flag}` | {_plain(s.help)} |")
    lines += ["", "## Other environment variables", "", "| variable | meaning |", "|---|---|"]
    lines += [f"| `{'`, `'.join(n.split(', '))}` | {text} |" for n, text in ENVIRONMENT.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write every generated page into the site being built."""
    import mkdocs_gen_files

    pages = [*api_pages(), ("reference/cli.md", cli_page()), ("reference/configuration.md", configuration_page())]
    for path, text in pages:
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)


if __name__ in ("__main__", "<run_path>") or os.environ.get("MKDOCS_GEN_FILES"):
    main()
