"""`wattwise example-data DIR`: write the documentation's example inputs into a folder, to look at and use."""

from __future__ import annotations

import argparse
from typing import Any

from wattwise.cli.main import add_command


def register(sub: Any) -> None:
    """Add the `example-data` command to the `wattwise` parser."""
    p = add_command(sub, "example-data")
    p.add_argument("directory", metavar="DIR", help="folder to write into (created if needed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the files and list them."""
    from wattwise.tools.example_data import write_example_data

    for path in write_example_data(args.directory):
        print(path)
    return 0
