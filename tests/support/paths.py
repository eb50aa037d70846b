"""Where things are: the checkout, the tests' data and scripts, and the real measured data beside it."""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout's root (the folder holding pyproject.toml).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Small files the tests read (0.1.0 stores and their dumps).
DATA_DIR = REPO_ROOT / "tests" / "data"
#: Training scripts the integration tests start as processes.
SCRIPTS_DIR = REPO_ROOT / "tests" / "scripts"
#: Source folder (relative to the root) -> import name, for every top-level package the distribution installs.
PACKAGE_ROOTS = {
    "core/wattwise": "wattwise",
    "lightning_energy": "lightning_energy",
    "accelerate_energy": "accelerate_energy",
}


def shared_data_dir() -> Path:
    """The real measured data (Zeus traces and profiles, Perseus profiles).

    Returns:
        `$WATTWISE_SHARED_DATA` when set, else `../shared/data` beside the checkout; it may not exist.
    """
    env = os.environ.get("WATTWISE_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"
