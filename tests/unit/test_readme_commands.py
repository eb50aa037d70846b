"""The README's set-up is two commands on a fresh machine, one for the demo and one for the tests, and CI runs
the README's test command: a user and CI test the project the same way."""

from __future__ import annotations

from tests.support.docs_blocks import blocks_of
from tests.support.paths import REPO_ROOT


def commands(block_code: str) -> list[str]:
    return [line.split("#")[0].strip() for line in block_code.splitlines() if line.split("#")[0].strip()]


def test_the_readme_gives_the_demo_and_the_test_command_and_ci_runs_the_test_command() -> None:
    readme = [c for b in blocks_of(REPO_ROOT / "README.md") if b.language == "bash" for c in commands(b.code)]
    assert readme[0] == "make demo"  # the quick start's first command
    assert "make test" in readme
    ci = commands((REPO_ROOT / ".ci" / "run").read_text())
    assert "make test" in ci
