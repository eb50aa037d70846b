"""`wattwise run [--mode M] [--eta E] [--job J] ... -- CMD ARGS...`: one command with wattwise on.

Sets both flags (`LIGHTNING_ENERGY=1`, `ACCELERATE_ENERGY=1`) and the settings given as options (as the
`LIGHTNING_ENERGY_*` and `ACCELERATE_ENERGY_*` variables) for CMD alone: a training script, `accelerate
launch`, `torchrun`. Every Lightning `Trainer` and every `Accelerator` CMD builds, in every process it
starts, is then measured without a line of code. Tells where the summary went; exits with CMD's code.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wattwise import flags
from wattwise.cli.main import add_command
from wattwise.cli.measure import EXIT_NOT_FOUND, _run_command, add_wrapped_command, missing_command, wrapped_command
from wattwise.config import (
    CONFIG_HELP,
    OVERRIDES_HELP,
    SETTINGS,
    EnergyConfig,
    check_cap_given,
    key_type,
    load_config,
    setting_values,
)
from wattwise.errors import ConfigError, UsageError, WattwiseError
from wattwise.record.summary import simulated_label, with_uncertainty


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise run` command to the `wattwise` parser."""
    p = add_command(sub, "run")
    for s in SETTINGS:
        kind = key_type(s.key)
        text = s.help.replace("%", "%%")  # argparse formats help with %: "10%" must stay literal
        if kind is bool:
            p.add_argument(_flag(s.name), dest=s.name, action="store_true", default=None, help=text)
        else:
            p.add_argument(_flag(s.name), dest=s.name, type=kind, metavar=s.name.upper(), help=text)
    p.add_argument("--config", metavar="YAML", help=CONFIG_HELP)
    p.add_argument(
        "--override",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{OVERRIDES_HELP} (repeatable)",
    )
    add_wrapped_command(p)
    p.set_defaults(func=run, setting_flags={s.key: _flag(s.name) for s in SETTINGS})


def run(args: argparse.Namespace) -> int:
    """Run `wattwise run` with its parsed arguments.

    Returns:
        The exit status.
    """
    cmd = wrapped_command(args.command, usage="wattwise run [options] -- CMD ARGS...")
    given: dict[str, Any] = {s.name: getattr(args, s.name) for s in SETTINGS}
    # The settings are checked here, before CMD runs, with the options' names in the message.
    cfg = load_config([args.config] if args.config else [], args.overrides, setting_values(given))
    check_cap_given("wattwise run", cfg, given, {s.name: f"--{s.name.replace('_', '-')}" for s in SETTINGS})
    if missing_command(cmd, "wattwise run"):
        return EXIT_NOT_FOUND
    env = flag_environment(os.environ, {**given, "config": args.config, "overrides": args.overrides})
    try:  # the variables CMD inherits are read too: a bad one is refused now, not in every worker
        cfg = flags.config_from_env(flags.ACCELERATE, env)
        flags.config_from_env(flags.LIGHTNING, env)
    except ConfigError as err:
        raise UsageError(*err.parts) from None
    summary = Path(cfg.output_dir) / "summary.json"
    before = _mtime(summary)
    os.environ.update(env)  # CMD inherits this process's environment
    code = _run_command(cmd)
    _tell_summary(summary, before, cfg)
    return code if code >= 0 else 128 - code


def flag_environment(environ: Mapping[str, str], values: Mapping[str, object]) -> dict[str, str]:
    """`environ` with both flags on and each setting given (not None, not empty) under both prefixes."""
    env = dict(environ)
    env[flags.UNDER_WATTWISE_RUN] = "1"
    for prefix in flags.PREFIXES:
        env[prefix] = "1"
        for name, value in values.items():
            if value is None or value == []:
                continue
            if isinstance(value, bool):
                text = "1" if value else "0"
            elif isinstance(value, list):
                text = shlex.join(value)
            else:
                text = str(value)
            env[flags.env_var(prefix, name)] = text
    return env


def _why_no_summary(cfg: EnergyConfig) -> str:
    """Why CMD wrote no summary, for the line `wattwise run` ends with.

    Nothing to measure on this machine (found as the run finds its devices), else what remains: no Trainer
    or Accelerator trained to its end, or measurement stopped with a warning.
    """
    if cfg.devices.backend == "auto":
        from wattwise.devices import discover  # the device backends: only when no summary came

        try:
            found = discover("auto", include_cpu=cfg.devices.cpu)
        except WattwiseError:
            found = None
        if found is not None and not found.gpus and not found.cpus:
            return (
                "nothing to measure on this machine: no GPU, and the CPU package's energy counter is not "
                "readable; --backend simulated tries wattwise on the simulated GPU"
            )
    return (
        "the command trained no Lightning Trainer or Accelerator to its end, or wattwise stopped measuring: "
        "its warning above says why"
    )


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime_ns / 1e9
    except OSError:
        return None


def _tell_summary(path: Path, before: float | None, cfg: EnergyConfig) -> None:
    after = _mtime(path)
    if after is None or after == before:
        print(f"wattwise run: no summary written to {path} ({_why_no_summary(cfg)})", file=sys.stderr)
        return
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    print(f"wattwise run: summary: {path}" + _facts(data if isinstance(data, dict) else {}), file=sys.stderr)


def _facts(data: Mapping[str, object]) -> str:
    """` (simulated...; completed, 200 steps, 112.6 ± 1.4 J)`: what the summary says, marked when simulated."""
    facts = [str(data[k]) for k in ("status",) if k in data]
    if isinstance(data.get("steps"), int):
        facts.append(f"{data['steps']} steps")
    energy, uncertainty = data.get("energy_j"), data.get("energy_uncertainty_j")
    if isinstance(energy, int | float):
        facts.append(with_uncertainty(energy, uncertainty if isinstance(uncertainty, int | float) else None, "J"))
    driven = data.get("simulated_driven_by")
    label = simulated_label(data.get("simulated") is True, driven if isinstance(driven, str) else None)
    text = ", ".join(facts)
    if label:
        text = f"{label}; {text}" if text else label
    return f" ({text})" if text else ""
