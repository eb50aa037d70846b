"""Every shell and Python block of the README and the documentation site runs, in the order of its page.

A page's blocks run one after the other in one temporary folder laid out like a clone (the repository's
Makefile, examples, configs and .venv linked in), so a later block may use what an earlier one wrote.
`bash` blocks run in bash with `-e -o pipefail`, `python` blocks with this interpreter (the project's venv).
A block preceded by `<!-- not-run: REASON -->` is skipped; it must say why (it needs a GPU, a cluster, root,
or a script of the reader's own). Blocks of any other language (text, json, yaml, csv) are output or data.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT as ROOT

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: What a page's folder links from the repository, as a clone would have it.
LINKED = ("Makefile", "pyproject.toml", "pth_build.py", ".venv", "core", "lightning_energy", "accelerate_energy",
          "examples", "configs", "deploy")
RUN = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)[^\n]*$")
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->")
BLOCK_TIMEOUT_S = 300


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    line: int
    language: str
    code: str
    not_run: str | None


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of `page`, with the reason of a `not-run` marker on the line before each."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith(fence) and not lines[j].strip("`"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.search(before)
        found.append(Block(i + 1, language, "\n".join(lines[i + 1:end]) + "\n",
                           marker.group(1).strip() if marker else None))
        i = end + 1
    return found


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


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


def _environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WATTWISE_", "ACCELERATE_ENERGY",
                                                                     "LIGHTNING_ENERGY"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["WATTWISE_HOME"] = str(folder / "home")
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _make_would_install(folder: Path, env: dict[str, str]) -> bool:
    """Whether a `make` target would install first (the venv is missing or older than pyproject.toml)."""
    return subprocess.run(["make", "-q", ".venv/.installed"], cwd=folder, env=env, capture_output=True).returncode != 0


@pytest.mark.timeout(1200)  # a page's blocks run one after the other: several trainings on a busy machine
@pytest.mark.parametrize("page", [p for p in PAGES if any(b.language in RUN and b.not_run is None
                                                            for b in blocks_of(p))], ids=page_id)
def test_page_blocks_run(page: Path, tmp_path: Path) -> None:
    for name in LINKED:
        if (ROOT / name).exists():
            (tmp_path / name).symlink_to(ROOT / name)
    env = _environment(tmp_path)
    not_here: list[str] = []
    for block in blocks_of(page):
        if block.not_run is not None or block.language not in RUN:
            continue
        where = f"{page_id(page)}:{block.line}"
        if RUN[block.language] == "python":
            script = tmp_path / f"block_{block.line}.py"
            script.write_text(block.code)
            command = [sys.executable, str(script)]
        else:
            if re.search(r"^\s*make\b", block.code, re.MULTILINE) and _make_would_install(tmp_path, env):
                not_here.append(where)
                continue
            command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (f"{where} failed (exit {done.returncode}):\n{block.code}\n"
                                      f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    if not_here:
        pytest.skip(f"the other blocks ran; {', '.join(not_here)} would reinstall .venv here (pyproject.toml is "
                    "newer than .venv/.installed): run `make install` first")
