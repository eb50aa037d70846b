"""Every shell and Python block of the README and the documentation site runs, in the order of its page.

A page's blocks run one after the other in one temporary folder laid out like a clone (the repository's
Makefile, examples, configs and .venv linked in), so a later block may use what an earlier one wrote.
`bash` blocks run in bash with `-e -o pipefail`, `python` blocks in this interpreter (the project's venv) as
`python block.py` would run them (tests/support/python_block.py: a failure is confirmed in a process of
its own).
A block preceded by `<!-- not-run: REASON -->` is skipped; it must say why (it needs a GPU, a cluster, root,
or a script of the reader's own). Blocks of any other language (text, json, yaml, csv) are output or data.

Where a block runs one of the examples, what the page says it does is checked right after it (`EXPECTED`):
the examples are tested as the pages run them, once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.docs_blocks import PAGES, RUN, Block, blocks_of, page_id
from tests.support.paths import REPO_ROOT as ROOT
from tests.support.python_block import run_python_block
from tests.support.summaries import assert_tuned, read_summary

#: What a page's folder links from the repository, as a clone would have it.
LINKED = (
    "Makefile",
    "pyproject.toml",
    "pth_build.py",
    ".venv",
    "core",
    "lightning_energy",
    "accelerate_energy",
    "examples",
    "configs",
    "deploy",
)
BLOCK_TIMEOUT_S = 300


def _lightning_example_tuned(folder: Path, output: str) -> None:
    record = read_summary(folder / "wattwise_runs" / "lightning" / "summary.json")
    assert record["framework"] == "lightning"
    assert_tuned(record, 1000)  # the example's default --max-steps
    # Enough steps that tuning finishes well before the end and the run trains at its choice (the page says so).
    assert record["power_limit"]["tuning"]["steps_at_chosen"] >= 200


def _accelerate_example_tuned_with_the_flag_alone(folder: Path, output: str) -> None:
    assert "epoch 0: loss" in output
    record = read_summary(folder / "wattwise_runs" / "summary.json")
    assert record["framework"] == "accelerate"
    assert_tuned(record, 256)  # 4096 samples in batches of 32, two epochs


def _trainer_example_tuned_with_no_line_of_its_own(steps: int) -> Callable[[Path, str], None]:
    def check(folder: Path, output: str) -> None:
        assert_tuned(read_summary(folder / "wattwise_runs" / "summary.json"), steps)

    return check


def _recurring_example_recorded_each_run(folder: Path, output: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "wattwise", "jobs", "show", "regression", "--json"],
        env=_environment(folder),
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    runs = json.loads(shown)["runs"]
    assert len(runs) == 2
    assert all(r["energy_j"] > 0 for r in runs)
    assert [r["state"] for r in runs] == ["reached", "reached"]  # the guide's bound lets each run reach the target
    # The first run of a batch size tunes its limit; the job remembers it for that batch size.
    assert runs[0]["power_limit_w"] is not None


def _made_up_job_left_out_of_the_users_store(folder: Path, output: str) -> None:
    assert "stopped after epoch" in output
    shown = subprocess.run(
        [sys.executable, "-m", "wattwise", "jobs", "show", "resnet50/imagenet"],
        env=_environment(folder),
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 2, shown.stdout  # the snippet used a scratch store, not the user's own
    assert "no job named 'resnet50/imagenet'" in shown.stderr


@dataclass(frozen=True)
class Expected:
    """What the block of `page` whose code holds `code` leaves behind: `check(folder, its output)` passes."""

    page: str
    code: str
    check: Callable[[Path, str], None]

    def matches(self, page: Path, block: Block) -> bool:
        return page_id(page) == self.page and self.code in block.code


EXPECTED = (
    Expected("docs/getting-started.md", "examples/lightning_train.py --mode tune", _lightning_example_tuned),
    Expected(
        "docs/getting-started.md",
        "examples/accelerate_train.py --epochs 2",
        _accelerate_example_tuned_with_the_flag_alone,
    ),
    Expected(
        "docs/getting-started.md",
        "examples/trainer_train.py --max-steps 100",
        _trainer_example_tuned_with_no_line_of_its_own(100),
    ),
    Expected(
        "docs/guides/recurring.md",
        "python examples/recurring_job.py --max-epochs 10\npython examples/recurring_job.py --max-epochs 10",
        _recurring_example_recorded_each_run,
    ),
    Expected("docs/guides/recurring.md", 'name="resnet50/imagenet"', _made_up_job_left_out_of_the_users_store),
)


def test_each_expectation_checks_one_block_that_runs() -> None:
    for expected in EXPECTED:
        page = ROOT / expected.page
        found = [b for b in blocks_of(page) if b.runs and expected.matches(page, b)]
        assert len(found) == 1, f"{expected.page}: {len(found)} running blocks hold {expected.code!r}, not one"


def test_every_example_is_run_and_checked() -> None:
    """Each script of examples/ runs in a page with its result checked here, or in test_examples.py."""
    tested_there = (ROOT / "tests" / "integration" / "test_examples.py").read_text()
    for example in sorted((ROOT / "examples").glob("*.py")):
        name = f"examples/{example.name}"
        checked_here = any(name in expected.code for expected in EXPECTED)
        assert checked_here or f'"{example.name}"' in tested_there, f"{name} is neither checked here nor tested"


def test_every_page_with_code_is_collected() -> None:
    pages = {page_id(p) for p in PAGES if any(b.language in RUN for b in blocks_of(p))}
    assert {"README.md", "docs/getting-started.md", "docs/guides/pipeline.md"} <= pages


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_blocks_are_marked_honestly(page: Path) -> None:
    for block in blocks_of(page):
        where = f"{page_id(page)}:{block.line}"
        assert block.language != "console", f"{where}: use `bash` for commands and `text` for their output"
        if block.not_run is not None:
            assert block.language in RUN, f"{where}: a not-run marker on a block that would not run anyway"
            assert len(block.not_run) > 10, f"{where}: a not-run marker must say why the block cannot run here"


def test_a_python_block_runs_as_a_script_and_leaves_the_test_process_as_it_was(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = {"PATH": os.environ["PATH"], "ONLY_HERE": "1"}
    cwd, environ, argv = os.getcwd(), dict(os.environ), list(sys.argv)
    block = tmp_path / "block_1.py"
    block.write_text("import os, sys\nprint(__name__, os.getcwd(), os.environ.get('ONLY_HERE'), sys.argv[0])\n")
    code, output = run_python_block(block, env, capfd, BLOCK_TIMEOUT_S)
    assert code == 0 and output == f"__main__ {tmp_path} 1 {block}\n"
    assert (os.getcwd(), dict(os.environ), sys.argv) == (cwd, environ, argv)
    # A block that fails fails in a process of its own too: its exit status and output are that process's.
    block.write_text("import sys\nprint('wrote half')\nsys.exit('the page is wrong')\n")
    code, output = run_python_block(block, env, capfd, BLOCK_TIMEOUT_S)
    assert code == 1 and output == "wrote half\nthe page is wrong\n"


def _environment(folder: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WATTWISE_", "ACCELERATE_ENERGY", "LIGHTNING_ENERGY"))
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["WATTWISE_HOME"] = str(folder / "home")
    # The simulated GPU's physics of the tests (tests/conftest.py: the ideal one), not the default: the pages'
    # examples run a few dozen steps, which the realistic physics' profile windows do not fit (the page says so).
    if "WATTWISE_SIMULATED_PHYSICS" in os.environ:
        env["WATTWISE_SIMULATED_PHYSICS"] = os.environ["WATTWISE_SIMULATED_PHYSICS"]
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _make_would_install(folder: Path, env: dict[str, str]) -> bool:
    """Whether a `make` target would install first (the venv is missing or older than pyproject.toml)."""
    return subprocess.run(["make", "-q", ".venv/.installed"], cwd=folder, env=env, capture_output=True).returncode != 0


@pytest.mark.timeout(1200)  # a page's blocks run one after the other: several trainings on a busy machine
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.runs for b in blocks_of(p))], ids=page_id)
def test_page_blocks_run(page: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    for name in LINKED:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    env = _environment(tmp_path)
    not_here: list[str] = []
    for block in blocks_of(page):
        if not block.runs:
            continue
        where = f"{page_id(page)}:{block.line}"
        if RUN[block.language] == "python":
            script = tmp_path / f"block_{block.line}.py"
            script.write_text(block.code)
            code, output = run_python_block(script, env, capfd, BLOCK_TIMEOUT_S)
        else:
            if re.search(r"^\s*make\b", block.code, re.MULTILINE) and _make_would_install(tmp_path, env):
                not_here.append(where)
                continue
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            code, output = done.returncode, f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
            output = done.stdout + done.stderr if code == 0 else output
        assert code == 0, f"{where} failed (exit {code}):\n{block.code}\n{output[-8000:]}"
        for expected in EXPECTED:
            if expected.matches(page, block):
                expected.check(tmp_path, output)
    if not_here:
        pytest.skip(
            f"the other blocks ran; {', '.join(not_here)} would reinstall .venv here (pyproject.toml is "
            "newer than .venv/.installed): run `make install` first"
        )
