"""Where wattwise keeps its state on disk."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """`$WATTWISE_HOME`, else `$XDG_STATE_HOME/wattwise`, else `~/.local/state/wattwise`.

    Holds the guard's journal (GPU settings to restore after a crash), the simulated GPUs' settings and
    the default SQLite store.
    """
    home = os.environ.get("WATTWISE_HOME")
    if home:
        return Path(home)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "wattwise"
