"""`python -m wattwise`: the same command line as the `wattwise` script."""

from __future__ import annotations

import sys

from wattwise.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
