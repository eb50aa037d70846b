"""A throwaway PostgreSQL server for the store's tests, found on PATH or in Debian's package."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from tests.support.network import free_port


def _pg_binaries() -> tuple[str, str] | None:
    """initdb and pg_ctl from PATH, else the newest /usr/lib/postgresql/*/bin (Debian's package)."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return initdb, pg_ctl
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(f"{bindir}/initdb", os.X_OK) and os.access(f"{bindir}/pg_ctl", os.X_OK):
            return f"{bindir}/initdb", f"{bindir}/pg_ctl"
    return None


def _server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, run it as `postgres` (or `nobody`)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    pytest.skip("running as root and no 'postgres' or 'nobody' user to run a PostgreSQL server as")


@contextmanager
def postgres_server() -> Iterator[str]:
    """A server on a unix socket in a temporary directory, stopped at the end; yields its URL.

    Skips the test when the server binaries are not installed.
    """
    binaries = _pg_binaries()
    if binaries is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin; "
            "install the `postgresql` package to run the PostgreSQL store tests"
        )
    initdb, pg_ctl = binaries
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="wattwise-pg-"))
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, port = root / "data", free_port()

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, user=user, capture_output=True, text=True, timeout=120, check=False)

    done = run([initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
    if done.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {done.stderr.strip()}")
    options = f"-k {root} -p {port} -c listen_addresses='' -c fsync=off"
    start = [pg_ctl, "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "-t", "60", "start"]
    done = run(start)
    if done.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {done.stderr.strip()} {log[-2000:]}")
    try:
        yield f"postgresql://postgres@/postgres?host={root}&port={port}"
    finally:
        run([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "-t", "60", "stop"])
        shutil.rmtree(root, ignore_errors=True)


def empty_database(url: str) -> None:
    """Drop every table of the server's `public` schema (a SQLAlchemy URL), as on a new server."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE")
        conn.exec_driver_sql("CREATE SCHEMA public")
    engine.dispose()
