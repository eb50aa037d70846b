"""The agent's audit log: one JSON line per GPU setting it changes, in its state dir, rotated.

Each line says when, who (uid and pid as the kernel named the caller; the job name the caller gave), which
GPU (index and UUID where the backend has one), the setting, its value before and after, and why:

    {"time": "2026-11-25T23:40:01.52Z", "uid": 1001, "pid": 4242, "job": "bert", "gpu_index": 0,
     "gpu_uuid": "GPU-...", "setting": "power_limit_w", "old": 300.0, "new": 200.0, "why": "requested"}

`why` is one of: `requested` (the holder asked), `released` (the holder gave the GPU back), `holder ended`
(its process ended: the agent restored the GPU), `holder gone at start` (it ended while no agent ran),
`restart: holder alive` (an agent start re-applied a live holder's setting), `refused: ...` (outside the
caller's allocation), `not logged: ...` (see below). The file is `audit.jsonl` (0600 in the 0700 state
dir), never opened through a symbolic link; at 10 MiB it moves to `audit.jsonl.1` (five kept), so it
never grows without bound.

So that one user cannot rotate everyone else's history out, each user other than root has a share: at
most `USER_LINES_PER_WINDOW` lines per `USER_WINDOW_S`. The moment a user passes it, one `not logged:
uid U passed its share ...` line says so; that user's further lines are counted, not written, and the
next line of theirs that is written is preceded by one `not logged: N more line(s) ...` line (with
`setting` null), as is the agent's stop (`close`), so no count is lost at a restart. At the default share
one user needs weeks of changes to fill the five rotated files.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wattwise.agent.connections import ShareWindow, share_window
from wattwise.devices.base import DeviceSpec

AUDIT_NAME = "audit.jsonl"
#: Size at which the audit log is rotated, and how many old files are kept.
MAX_AUDIT_BYTES = 10 * 1024 * 1024
AUDIT_BACKUPS = 5
#: Each user's share of the audit log (root has none): lines per window.
USER_LINES_PER_WINDOW = 600
USER_WINDOW_S = 3600.0


class AuditLog:
    """Appends one JSON line per change to `audit.jsonl` in the agent's state dir."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        max_bytes: int = MAX_AUDIT_BYTES,
        backups: int = AUDIT_BACKUPS,
        user_lines: int = USER_LINES_PER_WINDOW,
        window_s: float = USER_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """The audit log in `state_dir` (opened at each line, so a full disk or a rotation never sticks).

        Args:
            state_dir: the agent's state dir, already checked (`AgentJournal.prepare`).
            max_bytes: the size at which the file is rotated.
            backups: how many rotated files are kept.
            user_lines: lines one user (not root) may add per `window_s`.
            window_s: the window of a user's share, in seconds of `clock`.
            clock: monotonic seconds.
        """
        self.path = Path(state_dir) / AUDIT_NAME
        self.max_bytes, self.backups = max_bytes, backups
        self.user_lines, self.window_s, self.clock = user_lines, window_s, clock
        #: uid -> (window start, lines written in it, lines not written since the last one written).
        self._shares: dict[int, ShareWindow] = {}

    def record(
        self, *, uid: int, pid: int, job: str, device_spec: DeviceSpec, setting: str, old: Any, new: Any, why: str
    ) -> None:
        """Append one change (or count it, past the user's share).

        Args:
            uid: the caller's uid (the kernel's, SO_PEERCRED), or the holder's when the agent acts for it.
            pid: the caller's or holder's pid.
            job: the holder's job name ("" when none was given).
            device_spec: the GPU's spec (`Device.spec()`): its index and, where known, its UUID.
            setting: "power_limit_w" or "locked_sm_clocks_mhz".
            old: the value before the change.
            new: the value after it.
            why: the reason (see the module's docstring).

        Raises:
            OSError: The line cannot be written (a full disk, a symbolic link where the file should be).
        """
        line = _line(uid, pid, job, device_spec.get("index"), device_spec.get("uuid"), setting, old, new, why)
        if uid == 0:
            self._append([line])
            return
        start, written, dropped = share_window(self._shares.get(uid), self.clock(), self.window_s)
        if written >= self.user_lines:
            self._shares[uid] = (start, written, dropped + 1)
            if dropped == 0:  # the first line past the share: said now, not only at the next line written
                note = (
                    f"not logged: uid {uid} passed its share of {self.user_lines} line(s) per {self.window_s:g} s; "
                    "its further lines are counted until the next window"
                )
                self._append([_line(uid, None, "", None, None, None, None, None, note)])
            return
        lines = [line]
        if dropped:
            lines.insert(0, self._dropped_line(uid, dropped))
        self._append(lines)
        self._shares[uid] = (start, written + 1, 0)

    def _dropped_line(self, uid: int, dropped: int) -> str:
        note = (
            f"not logged: {dropped} more line(s) of uid {uid} past its share of {self.user_lines} per "
            f"{self.window_s:g} s"
        )
        return _line(uid, None, "", None, None, None, None, None, note)

    def _append(self, lines: list[str]) -> None:
        """Write `lines` at the end of the file (rotated first when full), never through a symbolic link."""
        data = "".join(f"{line}\n" for line in lines).encode()
        try:
            size = os.lstat(self.path).st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(data) > self.max_bytes:
            self._rotate()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        """audit.jsonl -> .1 -> .2 ... (the oldest dropped); renames move links themselves, never their targets."""
        for n in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{AUDIT_NAME}.{n}")
            if os.path.lexists(older):
                os.replace(older, self.path.with_name(f"{AUDIT_NAME}.{n + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{AUDIT_NAME}.1"))
        else:
            os.unlink(self.path)

    def close(self) -> None:
        """The agent stops: the lines each user had counted but not written are said, so no count is lost.

        Raises:
            OSError: The lines cannot be written.
        """
        lines = [self._dropped_line(uid, dropped) for uid, (_, _, dropped) in sorted(self._shares.items()) if dropped]
        self._shares = {uid: (start, written, 0) for uid, (start, written, _) in self._shares.items()}
        if lines:
            self._append(lines)


def _line(
    uid: int,
    pid: int | None,
    job: str,
    index: Any,
    uuid: Any,
    setting: str | None,
    old: Any,
    new: Any,
    why: str,
) -> str:
    now = time.time()
    return json.dumps(
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 100):02d}Z",
            "uid": uid,
            "pid": pid,
            "job": job,
            "gpu_index": index,
            "gpu_uuid": uuid,
            "setting": setting,
            "old": old,
            "new": new,
            "why": why,
        },
        allow_nan=False,
        default=str,
    )
