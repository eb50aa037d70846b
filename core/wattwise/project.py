"""The project a run belongs to: a name that tells one code base's runs from another's in the history.

By default the name of the working directory's git root (the folder holding `.git`, found upwards), else
the working directory's own name, as CodeCarbon's `project_name` defaults to its folder: runs started
anywhere inside one repository share its name. The `project` setting names it otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

#: A project's name at most (the run history's column).
MAX_PROJECT_CHARS = 128


def default_project(cwd: str | os.PathLike[str] | None = None) -> str:
    """The project of a run started in `cwd` (None: the working directory): its git root's name, else its own."""
    here = Path(cwd if cwd is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder.name or str(folder)
    return here.name or str(here)


def project_of(setting: str | None, cwd: str | os.PathLike[str] | None = None) -> str:
    """The project a run records: the `project` setting when given, else `default_project(cwd)`.

    Kept as the history keeps it: printable (any other character becomes `?`), at most `MAX_PROJECT_CHARS`.
    """
    name = setting if setting else default_project(cwd)
    return "".join(c if c.isprintable() else "?" for c in name)[:MAX_PROJECT_CHARS] or "?"
