"""Remembered power-limit choices, so the next run of the same job does not profile again.

A small JSON file (`<state dir>/power_limits.json`), updated under an exclusive file lock and replaced
atomically, so concurrent jobs on one machine never lose each other's entries. The key includes the GPU
model and count (a choice made on A40s says nothing about H100s) and, for recurring jobs, the batch size.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wattwise.paths import state_dir
from wattwise.power_limit import ProfileEntry


def memory_key(job: str, gpu_name: str, num_gpus: int, batch_size: int | None = None) -> str:
    key = f"{job}|{gpu_name}|x{num_gpus}"
    return key if batch_size is None else f"{key}|bs={batch_size}"


class LimitsMemory:
    """Saved tuning results, keyed by `memory_key`."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else state_dir() / "power_limits.json"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def load(self, key: str) -> tuple[ProfileEntry, list[ProfileEntry]] | None:
        """(chosen entry, whole profile) saved under `key`, or None."""
        with self._locked():
            entry = self._read().get(key)
        if not entry:
            return None
        try:
            chosen = ProfileEntry(**entry["chosen"])
            profile = [ProfileEntry(**e) for e in entry.get("profile", [])]
        except (KeyError, TypeError):
            return None
        return chosen, profile

    def save(self, key: str, chosen: ProfileEntry, profile: list[ProfileEntry], **extra: Any) -> None:
        with self._locked():
            data = self._read()
            data[key] = {"chosen": vars(chosen), "profile": [vars(e) for e in profile],
                         "saved_at": time.time(), **extra}
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.path)

    def forget(self, key: str) -> bool:
        with self._locked():
            data = self._read()
            if key not in data:
                return False
            del data[key]
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.path)
            return True
