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
#: Source roots and the packages documented in the API reference.
PACKAGES = (("core", "wattwise"), (".", "lightning_energy"), (".", "accelerate_energy"))
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
    "WATTWISE_INTENSITY": "`wattwise report`'s `--intensity` when not given: gCO2e/kWh, a CSV series, or a code "
    "of the bundled table of yearly averages (`DE`, `gcp:europe-west1`)",
    "WATTWISE_AGENT_SOCKET": "the node agent's Unix socket (default `/run/wattwise/agent.sock`)",
    "WATTWISE_POLICY": "the recurring-job policy (`wattwise`, or `zeus` for Zeus's published one)",
    "WATTWISE_THREADS": "the most threads the frontier solver uses (default: every CPU the process may run on)",
    "WATTWISE_KERNELS": "`0` makes the frontier solver use numpy and scipy instead of its compiled kernels "
    "(same plans, 3-5x slower; for comparison)",
    "WATTWISE_SHARED_DATA": "where the test suite and the benchmarks find the full measured traces and "
    "profiles (default `../shared/data` beside the checkout); tests that need them skip, saying so, "
    "when they are absent",
}


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


def api_pages() -> Iterator[tuple[str, str]]:
    """(path, markdown) of each API page and of the API index."""
    index = ["# API reference", "", "Generated from the docstrings of the code, one page per package.", ""]
    for source_root, package in PACKAGES:
        for group, modules in sorted(modules_of(package, source_root).items()):
            page = f"reference/api/{group}.md"
            body = [f"# `{group}`", ""]
            for module in modules:
                body += [f"::: {module}", "    options:", "      show_submodules: false", ""]
            yield page, "\n".join(body)
            index.append(f"- [`{group}`]({group}.md)")
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


def _rows(cls: type, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    hints = typing.get_type_hints(cls)
    notes = _comments(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _rows(typing.cast(type, kind), f"{prefix}{f.name}.")
        else:
            default = f.default if f.default is not dataclasses.MISSING else None
            yield f"{prefix}{f.name}", f"`{default!r}`".replace("|", "\\|"), notes.get(f.name, "")


def configuration_page() -> str:
    """Every configuration key, the settings given by name, and the environment variables."""
    from wattwise.config import SETTINGS, EnergyConfig

    lines = [
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
        lines.append(f"| `{s.name}` | `{s.key}` | {env} | `{flag}` | {s.help} |")
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
