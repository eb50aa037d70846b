"""Where the node agent keeps its settings journal, and reading the journal an older agent left.

The agent records the originals of every GPU it lends in one settings journal (`wattwise.settings.journal`:
the format, trust checks and atomic writing a root training process uses), `journal.json` in its state
dir (0700, owned by the agent's user), 0600, before the first change. While it runs, it holds the lock
beside it (`journal.lock`), as a guard does: a second agent on the same state dir is refused, and
`wattwise restore --journal-dir` leaves a live agent's journal alone. At start the agent puts back every
original it finds there (a crash, or a SIGKILL, left them changed). A journal or folder owned by someone
else, writable by others, or a symbolic link, is not trusted: the agent refuses to start and says why.

Agents before the settings package wrote another format (`{"version": 1, "backend", "gpus": {index:
{"holder", "originals"}}}`); it is still read, so that an upgrade after a crash still restores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from wattwise.errors import UsageError
from wattwise.safe_files import private_dir
from wattwise.settings.journal import (
    JournalChange,
    JournalProblem,
    check_changes,
    check_journal,
    file_problem,
    journal_folder_problem,
    read_object,
    save_changes,
)
from wattwise.settings.locks import lock_holder, release_lock, take_lock

JOURNAL_NAME = "journal.json"


class AgentJournal:
    """The agent's journal in its state dir: prepared (and locked) at start, loaded once, saved on change."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        """The journal of the agent whose state dir is `state_dir` (nothing is touched before `prepare`)."""
        self.folder = Path(state_dir)
        self.path = self.folder / JOURNAL_NAME
        self.lock = self.path.with_suffix(".lock")

    def prepare(self) -> None:
        """Create the state dir (0700), check that it and the journal can be trusted, and hold its lock.

        Raises:
            UsageError: the folder or journal cannot be trusted, or another live agent uses this state dir.
        """
        private_dir(self.folder)
        for what, path, problem in (
            ("state dir", self.folder, journal_folder_problem(self.folder)),
            ("journal", self.path, file_problem(self.path)),
        ):
            if problem:
                raise UsageError(f"agent {what} {path}: {problem}; fix it or choose another --state-dir")
        try:
            taken = take_lock(self.lock)
        except OSError as err:
            raise UsageError(
                f"agent journal lock {self.lock}: cannot open it ({err.strerror}); fix it or choose another --state-dir"
            ) from None
        if not taken:
            pid = lock_holder(self.lock)
            raise UsageError(
                f"--state-dir {self.folder}: another agent{f' (PID {pid})' if pid else ''} uses it; "
                "stop it or choose another --state-dir"
            )

    def close(self) -> None:
        """Let go of the state dir's lock (the agent stops; its process ending does the same)."""
        release_lock(self.lock)

    def load(self) -> list[JournalChange]:
        """The changes journalled (`{"device", "setting", "original"}`, checked); empty when there is none.

        Raises:
            UsageError: the journal cannot be trusted or understood (the GPUs are then restored by hand).
        """
        try:
            content = read_object(self.path)
            if "changes" not in content and content.get("version") == 1:
                return _version_1_changes(content)
            return check_journal(self.path, content, check_state_files=False).changes
        except FileNotFoundError:
            return []
        except JournalProblem as err:
            raise UsageError(
                f"agent journal {self.path}: unreadable ({err}); restore the GPUs by hand "
                "(nvidia-smi -rgc; nvidia-smi -pl) and delete it"
            ) from None

    def save(self, changes: Sequence[JournalChange]) -> None:
        """Journal `changes` (atomically, fsynced, 0600) before the change they cover is made.

        With no change left, the journal is removed.

        Raises:
            OSError: it cannot be written; the journal on disk is then as it was.
        """
        save_changes(self.path, changes)


def _version_1_changes(content: dict[str, object]) -> list[JournalChange]:
    """The changes of a journal an agent before the settings package wrote, checked as any journal's."""
    backend, gpus = content.get("backend"), content.get("gpus")
    if not isinstance(gpus, dict):
        raise JournalProblem("not an agent journal (no gpus)")
    changes = []
    for key, lease in gpus.items():
        originals = lease.get("originals") if isinstance(lease, dict) else None
        if not key.isdigit() or not isinstance(originals, dict):
            raise JournalProblem(f"GPU {key!r}: no originals")
        device = {"backend": backend, "index": int(key)}
        changes += [{"device": device, "setting": s, "original": v} for s, v in originals.items()]
    return check_changes(changes, check_state_files=False)
