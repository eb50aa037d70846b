"""`pip install 'wattwise[agent]'`: a node agent without torch, Lightning, Accelerate or OR-Tools.

A clean virtual environment (no system site packages) gets a wheel built from this checkout, first alone
(the base install), then with the `agent` extra, from a wheelhouse of what those two need: `pip wheel`
fills it through the machine's own pip configuration (its indexes, find-links and pip's cache of wheels it
built before, such as antlr4's, which is published as a source archive only), and the installs take
nothing else (`--no-index`). Where the wheelhouse cannot be filled (no index reachable, an empty cache) the
test is skipped and says so. About a minute here: building the wheel, the wheelhouse, two installs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import PACKAGE_ROOTS, REPO_ROOT

#: Not installed by `wattwise[agent]` (the agent imports none of them), and not importable in its environment.
HEAVY = ("torch", "lightning", "accelerate", "ortools", "scipy", "transformers", "numpy", "sqlalchemy", "alembic")


def _env() -> dict[str, str]:
    """A user's environment: nothing from this checkout or its virtual environment on the import path."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _run(argv: list[str], timeout_s: float = 240, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=_env(), **kwargs)  # type: ignore[call-overload, no-any-return]


def _pip_into(bin_dir: Path, house: Path, requirement: str) -> subprocess.CompletedProcess[str]:
    """`pip install REQUIREMENT` into the venv of `bin_dir`, from the wheelhouse alone."""
    return _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_dir / "python"),
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(house),
            requirement,
        ]
    )


@pytest.fixture(scope="module")
def lean_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the venv's bin/ folder, the wheelhouse), with the base install of a wheel built from the checkout."""
    root = tmp_path_factory.mktemp("lean")
    clone, dist, house, venv = root / "clone", root / "dist", root / "wheelhouse", root / "venv"
    clone.mkdir()
    for name in ("pyproject.toml", "README.md", "pth_build.py"):
        shutil.copy2(REPO_ROOT / name, clone / name)
    for folder in PACKAGE_ROOTS:
        shutil.copytree(
            REPO_ROOT / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
        )
    build = f"from setuptools import build_meta; print(build_meta.build_wheel({str(dist)!r}))"
    proc = _run([sys.executable, "-c", build], cwd=clone)
    assert proc.returncode == 0, proc.stderr
    wheel = dist / proc.stdout.strip().splitlines()[-1]

    proc = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--wheel-dir",
            str(house),
            f"wattwise[agent] @ {wheel.as_uri()}",
        ],
        timeout_s=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot gather the agent's dependencies (no package index reachable?): {proc.stderr[-400:]}")

    # Clean (no --system-site-packages) and without a pip of its own: this pip installs into it (--python),
    # which spares the venv's pip bootstrap (5 CPU-seconds).
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert proc.returncode == 0, proc.stderr
    proc = _pip_into(venv / "bin", house, "wattwise")
    assert proc.returncode == 0, proc.stderr
    yield venv / "bin", house


def _serve(bin_dir: Path, folder: Path) -> subprocess.Popen[str]:
    socket = folder / "agent.sock"
    return subprocess.Popen(
        [
            str(bin_dir / "wattwise"),
            "agent",
            "serve",
            "--backend",
            "simulated",
            "--simulated-gpus",
            "2",
            "--socket",
            str(socket),
            "--state-dir",
            str(folder / "state"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=folder,
    )


def test_the_base_install_has_no_framework_and_names_the_extra_each_part_needs(
    lean_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, _ = lean_venv
    python = str(bin_dir / "python")
    for name in (*HEAVY, "aiohttp", "prometheus_client"):
        proc = _run([python, "-c", f"import {name}"])
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, name

    # Measuring needs no extra.
    proc = _run(
        [str(bin_dir / "wattwise"), "measure", "--backend", "simulated", "--", python, "-c", "pass"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr

    # Each part that needs an extra says which, in one line.
    proc = _serve(bin_dir, tmp_path)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.strip().splitlines() == [
        "wattwise agent: error: `wattwise agent serve` needs aiohttp, which is not installed: "
        "pip install 'wattwise[agent]' (in a clone of wattwise: pip install '.[agent]')"
    ]
    proc = _run([str(bin_dir / "wattwise"), "frontier", "--help"])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "pip install 'wattwise[pipeline]'" in proc.stderr
    for package, extra in (("lightning_energy", "lightning"), ("accelerate_energy", "accelerate")):
        proc = _run([python, "-c", f"import {package} as p; p.__getattr__(p.__all__[0])"])
        assert proc.returncode == 1
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("wattwise.extras.MissingExtra: ") and f"pip install 'wattwise[{extra}]'" in last
        assert "During handling" not in proc.stderr  # no second traceback of the ModuleNotFoundError


def test_the_agent_extra_serves_status_on_a_unix_socket_without_torch(
    lean_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    bin_dir, house = lean_venv
    proc = _pip_into(bin_dir, house, "wattwise[agent]")
    assert proc.returncode == 0, proc.stderr
    for name in HEAVY:
        assert _run([str(bin_dir / "python"), "-c", f"import {name}"]).returncode != 0, name

    agent = _serve(bin_dir, tmp_path)
    try:
        socket = tmp_path / "agent.sock"
        deadline = time.monotonic() + 60
        while not socket.exists() and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert socket.exists(), agent.stderr.read() if agent.poll() is not None else "no socket after 60 s"
        proc = _run([str(bin_dir / "wattwise"), "agent", "status", "--json", "--socket", str(socket)])
        assert proc.returncode == 0, proc.stderr
        gpus = json.loads(proc.stdout)["gpus"]
        assert [g["index"] for g in gpus] == [0, 1] and all(g["holder"] is None for g in gpus)
        assert all(g["power_limit_w"] == g["default_power_limit_w"] for g in gpus)
    finally:
        agent.terminate()
        agent.communicate(timeout=30)
    assert agent.returncode == 0
