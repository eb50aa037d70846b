"""The fenced code blocks of the README and the documentation site, as the docs tests read them.

A block preceded by `<!-- not-run: REASON -->` is not run; it must say why (it needs a GPU, a cluster, root,
or a script of the reader's own). Blocks of a language outside `RUN` (text, json, yaml, csv) are output or
data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO_ROOT

#: Every page: the README and the documentation site.
PAGES = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
#: The languages whose blocks run, and what runs them.
RUN = {"bash": "bash", "sh": "bash", "shell": "bash", "python": "python", "py": "python"}
FENCE = re.compile(r"^(`{3,})\s*([\w+-]*)[^\n]*$")
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def runs(self) -> bool:
        """Whether the docs test runs it (a shell or Python block without a not-run marker)."""
        return self.language in RUN and self.not_run is None


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
        found.append(
            Block(i + 1, language, "\n".join(lines[i + 1 : end]) + "\n", marker.group(1).strip() if marker else None)
        )
        i = end + 1
    return found


def page_id(page: Path) -> str:
    """The page's path from the repository root, e.g. `docs/getting-started.md`."""
    return str(page.relative_to(REPO_ROOT))
