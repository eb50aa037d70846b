"""Leftovers of a run whose output disk was full are cleaned at the next start (issue 27): the temporary
`windows.csv` an earlier run could not finish is removed when the next run's window log opens, and a log
that cannot be started leaves no temporary behind."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from wattwise.record.files import WindowsLog


def test_a_temporary_left_by_an_earlier_run_is_removed_at_the_next_start(tmp_path: Path) -> None:
    stale = tmp_path / ".windows.csv.3f2a9c01d4e5.tmp"
    stale.write_text("start_time,window_name\n")
    other = tmp_path / ".windows-rank1.csv.3f2a9c01d4e5.tmp"  # another process's log: not this one's to remove
    other.write_text("")
    log = WindowsLog(tmp_path / "windows.csv", ["rank0/gpu0"])
    log.close()
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "windows.csv"]


def test_a_log_that_cannot_be_started_on_a_full_disk_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fdopen = os.fdopen

    class FullDisk:
        """A file on a full disk: every write and the flush at close fail with ENOSPC."""

        def __init__(self, fd: int) -> None:
            self.fh = real_fdopen(fd, "w")

        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def close(self) -> None:
            self.fh.close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("wattwise.record.files.os.fdopen", lambda fd, *a, **k: FullDisk(fd))
    with pytest.raises(OSError, match="No space left"):
        WindowsLog(tmp_path / "windows.csv", ["rank0/gpu0"])
    assert list(tmp_path.iterdir()) == []
