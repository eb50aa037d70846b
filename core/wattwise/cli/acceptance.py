"""`wattwise acceptance`: the real-GPU acceptance checks (`wattwise.tools.acceptance`)."""

from __future__ import annotations

import argparse
from typing import Any

from wattwise.cli.main import add_command


def register(sub: Any) -> None:
    """Add the `wattwise acceptance` command to the `wattwise` parser."""
    from wattwise.tools import acceptance

    parser: argparse.ArgumentParser = add_command(
        sub,
        "acceptance",
        description=acceptance.__doc__.split("\n\n")[0] if acceptance.__doc__ else None,
    )
    acceptance.add_arguments(parser)
    parser.set_defaults(func=acceptance.run_from_args)
