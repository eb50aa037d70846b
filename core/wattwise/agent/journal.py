"""The agent's journal: the original settings of every held GPU, on disk before the first change.

One JSON file, `journal.json`, in the agent's state dir (0700, owned by the agent's user), written
0600 atomically and fsynced. At start the agent puts back every original it finds there (a crash, or a
SIGKILL, left them changed), then empties it. A journal or folder owned by someone else, or writable by
others, is not trusted: the agent refuses to start and says why.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from wattwise.errors import UsageError
from wattwise.paths import private_dir, write_text

JOURNAL_NAME = "journal.json"
MAX_JOURNAL_BYTES = 1 << 20


class AgentJournal:
    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir)
        self.path = self.folder / JOURNAL_NAME

    def prepare(self) -> None:
        """Create the state dir (0700) and check that it and the journal can be trusted."""
        private_dir(self.folder)
        for what, path in (("state dir", self.folder), ("journal", self.path)):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            problem = _problem(st)
            if problem:
                raise UsageError(f"agent {what} {path}: {problem}; fix it or choose another --state-dir")

    def load(self) -> dict[str, Any]:
        """The journalled leases by GPU index (as strings); empty when there is no journal."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        with open(fd, "rb") as fh:
            raw = fh.read(MAX_JOURNAL_BYTES + 1)
        try:
            data = json.loads(raw)
            if len(raw) > MAX_JOURNAL_BYTES or not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
                raise ValueError("not an agent journal")
        except ValueError as err:
            raise UsageError(f"agent journal {self.path}: unreadable ({err}); restore the GPUs by hand "
                             "(nvidia-smi -rgc; nvidia-smi -pl) and delete it") from None
        gpus: dict[str, Any] = data["gpus"]
        return gpus

    def save(self, backend: str, leases: dict[str, Any]) -> None:
        """Write the journal (atomically, fsynced, 0600) before the change it covers is made."""
        write_text(self.path, json.dumps({"version": 1, "backend": backend, "gpus": leases}), mode=0o600)


def _problem(st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by the agent's user (uid {os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None
