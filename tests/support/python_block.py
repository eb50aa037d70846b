"""A documentation page's Python block, run in this interpreter as `python block.py` would run it.

Most Python blocks of the pages build a callback or call a function of wattwise; as a process of their own
each would pay again for importing torch, Lightning or transformers (6 to 8 CPU-s on a 2-core machine),
which the test's own process has already imported. `run_python_block` runs the file as `__main__` with the
page's environment, working folder, `sys.argv` and the script's folder first on `sys.path`, and gives back
its exit status and output, as a process would; it restores all of them afterwards, with the warnings
filters and Accelerate's process-wide state.

A block that fails here is run again in a process of its own, and that result stands: what the test
process had imported or set may change how a block runs, never whether a page that is right passes.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def _as_a_script(script: Path, env: dict[str, str]) -> Iterator[None]:
    environ, cwd, argv, path = dict(os.environ), os.getcwd(), sys.argv[:], sys.path[:]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(script.parent)
    sys.argv = [str(script)]
    sys.path.insert(0, str(script.parent))
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
        sys.argv, sys.path[:] = argv, path
        if "accelerate" in sys.modules:  # an Accelerator the block built is forgotten, as at a process's end
            from tests.support.accelerate_fixtures import reset_accelerate

            reset_accelerate()


def _here(script: Path, env: dict[str, str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capfd.readouterr()
    code = 0
    with _as_a_script(script, env):
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as done:  # as the interpreter ends: a number is the status, anything else is printed
            if done.code is None or isinstance(done.code, int):
                code = done.code or 0
            else:
                print(done.code, file=sys.stderr)
                code = 1
        except BaseException:  # what the interpreter would print before exiting 1
            traceback.print_exc()
            code = 1
    out, err = capfd.readouterr()
    return code, out + err


def run_python_block(
    script: Path, env: dict[str, str], capfd: pytest.CaptureFixture[str], timeout_s: float
) -> tuple[int, str]:
    """Run `script` (a page's block, written in the page's folder): its exit status and its output.

    Here first; a failure is confirmed by running it again in a process of its own (see the module docstring).
    """
    code, output = _here(script, env, capfd)
    if code == 0:
        return code, output
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stdout + done.stderr
