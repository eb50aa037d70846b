"""Every file wattwise writes is a regular file: created new, or a regular file replaced whole. A device node,
FIFO, socket or folder at the target is refused with one line (exit 2), and so is a link at a path the user
named (`report --html`, `--out`); a write that fails (a full disk) is one line and a non-zero exit, never
"wrote ...". (The FIFO stands for /dev/full and /dev/null, which a test must not risk replacing.)"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from wattwise.carbon.example import write_example
from wattwise.cli.main import main
from wattwise.safe_files import NotARegularFile, write_text


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_example(tmp_path / "example").run_dir


def test_a_fifo_at_the_target_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile, match=r"pipe is a FIFO \(named pipe\); wattwise writes only regular files"):
        write_text(fifo, "x")
    assert os.path.exists(fifo) and not fifo.is_file() and os.listdir(tmp_path) == ["pipe"]


def test_report_html_on_a_fifo_or_a_link_is_one_line_and_exit_2(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo, victim, link = tmp_path / "pipe", tmp_path / "victim.html", tmp_path / "link.html"
    os.mkfifo(fifo)
    victim.write_text("precious")
    link.symlink_to(victim)
    for target, kind in ((fifo, "a FIFO"), (link, "a symbolic link")):
        assert main(["report", str(run_dir), "--html", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{target} is {kind}" in err and "wrote" not in err
    assert victim.read_text() == "precious" and link.is_symlink()
    assert not (run_dir / "report.json").exists()  # refused before any report file was written


def test_report_out_that_is_a_link_is_refused(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "out").symlink_to(real, target_is_directory=True)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "is a symbolic link, not a folder" in err
    assert os.listdir(real) == []


def test_a_failed_write_is_one_line_and_a_non_zero_exit_never_wrote(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "wrote" not in err
    assert [p for p in os.listdir(tmp_path / "out") if p.endswith(".tmp")] == []
