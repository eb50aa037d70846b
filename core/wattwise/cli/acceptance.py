"""`wattwise acceptance`: the real-GPU acceptance checks (`wattwise.tools.acceptance`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the `wattwise acceptance` command to the `wattwise` parser."""
    from wattwise.tools import acceptance

    parser: argparse.ArgumentParser = sub.add_parser(
        "acceptance",
        help="check the NVML or amdsmi path on a real GPU (skips without one), or the three levers (--levers)",
        description=acceptance.__doc__.split("\n\n")[0] if acceptance.__doc__ else None,
    )
    acceptance.add_arguments(parser)
    parser.set_defaults(func=acceptance.run_from_args)
