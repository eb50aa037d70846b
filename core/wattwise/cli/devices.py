"""`wattwise devices`: what was found, why anything is missing, and GPU settings left changed.

Settings a dead wattwise process left changed are listed ("leftover: ...; run `wattwise restore`"), not
restored: listing devices changes nothing. Settings a running wattwise process holds are listed as in use.
"""

from __future__ import annotations

import argparse

from wattwise.cli.main import add_command
from wattwise.config import SETTING, default_of
from wattwise.devices import discover
from wattwise.safe_files import json_text
from wattwise.settings.recovery import leftover_lines

#: The energy setting `--backend` gives (`devices.backend`).
BACKEND = SETTING["backend"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise devices` command to the `wattwise` parser."""
    p = add_command(sub, "devices")
    p.add_argument("--backend", default=default_of(BACKEND.key), help=f"{BACKEND.help} (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run, setting_flags={BACKEND.key: "--backend"})


def run(args: argparse.Namespace) -> int:
    """Run `wattwise devices` with its parsed arguments.

    Returns:
        The exit status.
    """
    found = discover(args.backend, include_cpu=True)
    devices = [d.describe() for d in found.all]
    # Settings a dead run left changed are shown, not restored: listing devices changes nothing.
    leftovers = leftover_lines()
    if args.json:
        out = {"devices": devices, "notes": found.notes, "simulated": found.simulated}
        if leftovers:
            out["leftovers"] = leftovers
        print(json_text(out))
        return 0
    if not devices:
        print("no devices to measure")
    for info in devices:
        tag = " [SIMULATED]" if info["simulated"] else ""
        extra = ""
        if "power_limit_w" in info:
            lo, hi = info["power_limit_range_w"]
            extra = f", power limit {info['power_limit_w']:g} W (range {lo:g}-{hi:g} W)"
        if "physics" in info:  # a simulated GPU: which physics, and how often its energy counter changes
            period_s = info["energy_update_period_s"]
            counter = f"energy counter every {period_s * 1000:.0f} ms" if period_s else "exact energy counter"
            preset = info.get("preset")
            like = f", like an {preset['label']}" if preset else ""
            extra += f", {info['physics']} physics ({counter}{like})"
        print(f"{info['key']}: {info['name']} ({info['backend']}){tag}{extra}")
    for note in found.notes:
        print(f"note: {note}")
    for line in leftovers:
        print(line)
    return 0
