"""The compiled kernels give the numpy code's plans to the last bit, whatever the threads, and refuse bad input.

`wattwise.pipeline.kernels` is used when the C extension is built (an optional extension: a machine without a
C compiler gets the numpy code). Here both run on the same problems and must agree exactly: the plans, their
times, and every point of the frontier, since both do the same floating-point operations in the same order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pipeline import (
    problem_for,
    synthetic_profile,
)
from wattwise.pipeline import kernels
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import write_profile

UNIT_S = 0.001

built = pytest.mark.skipif(kernels._module is None, reason="the C extension is not built (no C compiler at install)")


def problems() -> list[PlanningProblem]:
    return [
        problem_for(synthetic_profile(4, 8, UNIT_S, 0), "1f1b", 6, 80.0),
        problem_for(synthetic_profile(3, 5, UNIT_S, 1), "gpipe", 4, 60.0),
        problem_for(synthetic_profile(5, 12, UNIT_S, 2, units=(37.0, 81.0)), "1f1b", 9, 95.0),
    ]


@built
def test_a_bad_thread_cap_is_one_line_and_exit_2(tmp_path: Path) -> None:
    profile = tmp_path / "profile.csv"
    write_profile(synthetic_profile(2, 3, UNIT_S, 0), profile)
    command = [
        sys.executable,
        "-m",
        "wattwise",
        "frontier",
        str(profile),
        "--microbatches",
        "2",
        "--unit-time",
        "0.001",
        "--p-blocking",
        "80",
        "--out",
        str(tmp_path / "f.json"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WATTWISE_THREADS": "many"})
    assert done.returncode == 2, done.stderr
    assert "WATTWISE_THREADS must be a positive integer" in done.stderr and "Traceback" not in done.stderr


def test_frontier_runs_without_scipy_when_the_kernels_are_built(tmp_path: Path) -> None:
    """A third of a small frontier's run time was importing scipy's sparse graph module."""
    if kernels._module is None:
        pytest.skip("the C extension is not built: scipy does the shortest paths")
    profile = tmp_path / "profile.csv"
    write_profile(synthetic_profile(2, 3, UNIT_S, 0), profile)
    code = (
        "import sys, runpy; sys.argv = ['wattwise', 'frontier', sys.argv[1], '--microbatches', '3', "
        "'--unit-time', '0.001', '--p-blocking', '80', '--out', sys.argv[2], '--quiet']\n"
        "from wattwise.cli.main import main\n"
        "code = main(sys.argv[1:])\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))\n"
        "sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(profile), str(tmp_path / "f.json")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
