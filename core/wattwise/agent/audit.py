"""The agent's audit log: one JSON line per GPU setting it changes, in its state dir, rotated.

Each line says when, who (uid and pid as the kernel named the caller; the job name the caller gave), which
GPU (index and UUID where the backend has one), the setting, its value before and after, and why:

    {"time": "2026-11-25T23:40:01.52Z", "uid": 1001, "pid": 4242, "job": "bert", "gpu_index": 0,
     "gpu_uuid": "GPU-...", "setting": "power_limit_w", "old": 300.0, "new": 200.0, "why": "requested"}

`why` is one of: `requested` (the holder asked), `released` (the holder gave the GPU back), `holder ended`
(its process ended: the agent restored the GPU), `holder gone at start` (it ended while no agent ran),
`restart: holder alive` (an agent start re-applied a live holder's setting). The file is `audit.jsonl`
(0600 in the 0700 state dir); at 10 MiB it moves to `audit.jsonl.1` (five kept), so it never grows
without bound.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import time
from pathlib import Path
from typing import Any

AUDIT_NAME = "audit.jsonl"
#: Size at which the audit log is rotated, and how many old files are kept.
MAX_AUDIT_BYTES = 10 * 1024 * 1024
AUDIT_BACKUPS = 5


class AuditLog:
    """Appends one JSON line per change to `audit.jsonl` in the agent's state dir."""

    def __init__(
        self, state_dir: str | os.PathLike[str], *, max_bytes: int = MAX_AUDIT_BYTES, backups: int = AUDIT_BACKUPS
    ) -> None:
        """Open (or create, 0600) the audit log in `state_dir`.

        Args:
            state_dir: the agent's state dir, already checked (`AgentJournal.prepare`).
            max_bytes: the size at which the file is rotated.
            backups: how many rotated files are kept.
        """
        self.path = Path(state_dir) / AUDIT_NAME
        previous = os.umask(0o177)  # the file and its rotated copies are created 0600
        try:
            self._handler = logging.handlers.RotatingFileHandler(
                self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
            )
        finally:
            os.umask(previous)
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger = logging.Logger(f"wattwise.agent.audit.{id(self)}")  # not the tree: never propagates
        self._logger.setLevel(logging.INFO)
        self._logger.addHandler(self._handler)

    def record(
        self, *, uid: int, pid: int, job: str, device_spec: dict[str, Any], setting: str, old: Any, new: Any, why: str
    ) -> None:
        """Append one change.

        Args:
            uid: the caller's uid (the kernel's, SO_PEERCRED), or the holder's when the agent acts for it.
            pid: the caller's or holder's pid.
            job: the holder's job name ("" when none was given).
            device_spec: the GPU's spec (`Device.spec()`): its index and, where known, its UUID.
            setting: "power_limit_w" or "locked_sm_clocks_mhz".
            old: the value before the change.
            new: the value after it.
            why: the reason (see the module's docstring).
        """
        now = time.time()
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 100):02d}Z",
            "uid": uid,
            "pid": pid,
            "job": job,
            "gpu_index": device_spec.get("index"),
            "gpu_uuid": device_spec.get("uuid"),
            "setting": setting,
            "old": old,
            "new": new,
            "why": why,
        }
        previous = os.umask(0o177)
        try:
            self._logger.info(json.dumps(line, allow_nan=False, default=str))
        finally:
            os.umask(previous)

    def close(self) -> None:
        """Flush and close the file."""
        self._handler.close()
