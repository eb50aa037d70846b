"""Run wattwise as an ordinary user from a test run as root (CI runs as root; users seldom do).

Root reads any file and enters any folder, so what an ordinary user meets (a file they may not read, a
socket they may not open) can only be tested by running the command as another user. The kernel needs no
passwd entry for that: the ids below belong to no account.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

USER_UID, OTHER_UID = 54321, 54322
USER_GID = 54320

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

#: Runs `-m wattwise ARGS` or `-c CODE ARGS` with this environment's packages, under any interpreter of
#: this version (argv: site folder, then "-m wattwise ARGS" or "-c CODE ARGS").
LAUNCH = """
import runpy, site, sys
site.addsitedir(sys.argv[1])
if sys.argv[2] == "-m":
    sys.argv = ["wattwise", *sys.argv[4:]]
    runpy.run_module("wattwise", run_name="__main__")
else:
    sys.argv = sys.argv[3:]
    exec(sys.argv[0])
"""


def unreachable_by_others(path: str) -> str | None:
    """The first folder on the way to `path` that other users may not enter, if any."""
    for folder in reversed(Path(os.path.realpath(path)).parents):
        if not os.stat(folder).st_mode & 0o001:
            return str(folder)
    return None


def user_python() -> str | None:
    """A Python of this version that other users may run: this one, else the system's."""
    for candidate in (sys.executable, f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        if os.path.exists(candidate) and unreachable_by_others(candidate) is None:
            return candidate
    return None


def why_not() -> str | None:
    """Why commands cannot run as an ordinary user here, or None when they can."""
    if not IS_ROOT:
        return "needs root to run a command as another user"
    if user_python() is None:
        return (
            f"this Python ({os.path.realpath(sys.executable)}) lies under "
            f"{unreachable_by_others(sys.executable)}, which other users may not enter, and no system Python "
            "of the same version exists: an ordinary user could not run wattwise"
        )
    return None


def popen_as(
    uid: int, gid: int, args: list[str], *, env: dict[str, str], cwd: str | Path = "/", **kwargs: Any
) -> subprocess.Popen[str]:
    """Start `python -m wattwise ...` or `python -c CODE ...` (`args`) as `uid`:`gid`, with no other group,
    in `env` (HOME and the like are the caller's to give) and this environment's packages."""
    python = user_python()
    assert python is not None, why_not()
    cmd = [python, "-c", LAUNCH, sysconfig.get_paths()["purelib"], *args]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.Popen(cmd, env=env, user=uid, group=gid, extra_groups=[], cwd=cwd, text=True, **kwargs)


def run_as(
    uid: int, gid: int, args: list[str], *, env: dict[str, str], cwd: str | Path = "/", timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`popen_as` to the end: its exit code, stdout and stderr."""
    proc = popen_as(uid, gid, args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{args[:3]} as uid {uid} did not end in {timeout_s} s:\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@contextlib.contextmanager
def shared_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder other users may enter (pytest's own are private to root), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        os.chmod(base, 0o755)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def give_to(path: Path, uid: int, gid: int) -> None:
    """Make `path` and everything under it the user's, as if they had written it (modes unchanged)."""
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def run_unprivileged(
    args: list[str], *, env: dict[str, str], cwd: Path, owned: Path | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """`args` as an ordinary user: the test's own user when it is one, else (root) USER_UID, to whom
    everything under `owned` (default `cwd`) is given first. Skips where no ordinary user can run wattwise."""
    import pytest

    if IS_ROOT:
        if (why := why_not()) is not None:
            pytest.skip(f"root reads any file, and an ordinary user cannot run wattwise here: {why}")
        give_to(owned or cwd, USER_UID, USER_GID)
        return run_as(USER_UID, USER_GID, args, env=env, cwd=cwd, timeout_s=timeout_s)
    cmd = [sys.executable, "-c", LAUNCH, sysconfig.get_paths()["purelib"], *args]
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run(cmd, env=full_env, cwd=cwd, text=True, capture_output=True, timeout=timeout_s, check=False)
