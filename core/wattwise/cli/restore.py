"""`wattwise restore`: put back GPU settings left changed by a process that died.

A journal is restored when no live process holds its lock, whatever pid it names. One held by a running
wattwise process is never touched, even with `--force`: that process restores its own settings when it
ends (SIGTERM does it), and restoring under it would only be undone by its next change.
"""

from __future__ import annotations

import argparse

from wattwise.cli.main import add_command
from wattwise.safe_files import json_text
from wattwise.settings.journal import journal_dir
from wattwise.settings.recovery import recover_stale_journals


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `wattwise restore` command to the `wattwise` parser."""
    p = add_command(sub, "restore")
    p.add_argument(
        "--force",
        action="store_true",
        help="also fail (exit 1) on settings still held by a running wattwise process, naming it; "
        "they are never restored under it (stop it: it restores them itself)",
    )
    p.add_argument("--journal-dir", default=None, help=f"journal folder (default {journal_dir()})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run `wattwise restore` with its parsed arguments.

    Returns:
        The exit status.
    """
    result = recover_stale_journals(args.journal_dir, include_live=args.force)
    if args.json:
        out: dict[str, list[str]] = {"restored": result.restored, "failed": result.failed}
        if result.held:
            out["held"] = result.held
        print(json_text(out))
    else:
        for line in result.restored:
            print(f"restored {line}")
        for line in result.failed:
            print(f"FAILED {line}")
        for line in result.held:
            print(f"in use: {line}")
        if not result.restored and not result.failed and not result.held:
            print("nothing to restore")
    return 1 if result.failed else 0
