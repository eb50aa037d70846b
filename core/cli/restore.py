"""`wattwise restore`: put back GPU settings left changed by a process that died."""

from __future__ import annotations

import argparse
import json

from wattwise.guard import journal_dir, recover_stale_journals


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("restore", help="restore GPU settings left changed by a crashed run",
                       description="Restore the power limits and clocks recorded in the guard's journal by "
                                   "processes that ended without restoring them (e.g. killed with SIGKILL).")
    p.add_argument("--force", action="store_true",
                   help="also restore the settings of wattwise processes that are still running")
    p.add_argument("--journal-dir", default=None, help=f"journal folder (default {journal_dir()})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = recover_stale_journals(args.journal_dir, include_live=args.force)
    if args.json:
        print(json.dumps({"restored": result.restored, "failed": result.failed}, indent=2))
    else:
        for line in result.restored:
            print(f"restored {line}")
        for line in result.failed:
            print(f"FAILED {line}")
        if not result.restored and not result.failed:
            print("nothing to restore")
    return 1 if result.failed else 0
