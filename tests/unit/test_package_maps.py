"""Both package maps follow the tree, and the install section follows pyproject.toml's extras.

The maps are the package docstring of `wattwise` (core/wattwise/__init__.py) and the "Package map" section
of docs/ARCHITECTURE.md. Each is a Markdown list, one entry per package, folder or module, written
`` - `name`: what it holds``; a nested entry's name is relative to the package above it, and a package or
folder ends with `/` (`run/`, then `    - `measurement`: ...` under it for `run/measurement`).

What must be listed, walking core/wattwise: every folder (packages and the package-data folders `configs/`,
`data/`, `dashboard/templates/`, which ship in the wheel) and every module whose name does not start with
`_`, plus `__main__` (the `python -m wattwise` entry point); a package's `__init__` is its folder's entry.
The store's Alembic revisions are the one exception: `store/migrations/versions/` is listed as a folder
and its `vNNNN_*.py` files are not, because a revision is added with every schema change and says what it
does in its own docstring (Alembic reads them in order; no code imports one by name).

A map may name nothing else: an entry for a module that does not exist (renamed, moved or removed) fails.
"""

from __future__ import annotations

import ast
import re
import sys

from tests.support.paths import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

PACKAGE = REPO_ROOT / "core" / "wattwise"
ARCHITECTURE = REPO_ROOT / "docs" / "ARCHITECTURE.md"
#: Listed as a folder only (see the module docstring).
FOLDERS_ONLY = ("store/migrations/versions",)
#: One map entry: its indentation and its name, in backticks right before a colon.
ENTRY = re.compile(r"^(?P<indent> *)- `(?P<name>[^`]+)`:")


def tree_names() -> set[str]:
    """Every folder (`a/b/`) and listed module (`a/b`) of the package, relative to core/wattwise."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*"):
        rel = path.relative_to(PACKAGE)
        parts = rel.parts
        if any(p.startswith((".", "__pycache__")) for p in parts) or "egg-info" in str(rel):
            continue
        parent = rel.parent.as_posix()
        if any(parent == f or parent.startswith(f"{f}/") for f in FOLDERS_ONLY):
            continue
        if path.is_dir():
            names.add(f"{rel.as_posix()}/")
        elif path.suffix == ".py" and (not path.stem.startswith("_") or path.stem == "__main__"):
            names.add(rel.with_suffix("").as_posix())
    return names


def map_entries(text: str) -> list[str]:
    """The full names of a map's entries, in order: each nested name joined to the package above it."""
    stack: list[tuple[int, str]] = []  # (indentation, full name) of the open packages and folders
    names: list[str] = []
    for line in text.splitlines():
        match = ENTRY.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        name = (stack[-1][1] if stack else "") + match["name"]
        names.append(name)
        if name.endswith("/"):
            stack.append((indent, name))
    return names


def section(markdown: str, heading: str) -> str:
    """The text of a `## heading` section of a Markdown page, up to the next heading of its level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.MULTILINE | re.DOTALL)
    assert match is not None, f"docs/ARCHITECTURE.md has no '## {heading}' section"
    return match[1]


def docstring_map() -> str:
    doc = ast.get_docstring(ast.parse(PACKAGE.joinpath("__init__.py").read_text(encoding="utf-8")))
    assert doc is not None, "core/wattwise/__init__.py has no docstring"
    return doc


def architecture_map() -> str:
    return section(ARCHITECTURE.read_text(encoding="utf-8"), "Package map")


MAPS = {
    "wattwise's package docstring (core/wattwise/__init__.py)": docstring_map,
    "docs/ARCHITECTURE.md's '## Package map'": architecture_map,
}


def test_the_tree_walk_finds_packages_modules_and_data_folders() -> None:
    names = tree_names()
    assert {"run/", "run/run", "devices/simulated/", "store/migrations/versions/", "configs/", "__main__"} <= names
    assert not any(n.startswith("store/migrations/versions/v") for n in names)


def test_both_maps_list_every_package_and_module_and_nothing_else() -> None:
    tree = tree_names()
    problems: list[str] = []
    for where, text_of in MAPS.items():
        entries = map_entries(text_of())
        listed = set(entries)
        problems += [f"{name} is missing from {where}" for name in sorted(tree - listed)]
        problems += [f"{where} lists {name}, which is not in core/wattwise" for name in sorted(listed - tree)]
        problems += [f"{where} lists {name} twice" for name in sorted({n for n in entries if entries.count(n) > 1})]
    assert not problems, "\n".join(problems)


def _requirement(spec: str) -> tuple[str, list[str]]:
    """A requirement's distribution name and the extras it asks for (`wattwise[store]` -> wattwise, [store])."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
    assert match is not None, spec
    return match[1], [e.strip() for e in (match[2] or "").split(",") if e.strip()]


def _install_entries() -> tuple[str, dict[str, str]]:
    """The install section's text before its list, and each extra's entry (its line and continuation lines)."""
    text = section(ARCHITECTURE.read_text(encoding="utf-8"), "Installing: the base and the extras")
    entries: dict[str, str] = {}
    current: str | None = None
    lead: list[str] = []
    for line in text.splitlines():
        match = ENTRY.match(line)
        if match is not None:
            current = match["name"]
            entries[current] = line
        elif current is not None and line.startswith(" ") and line.strip():
            entries[current] += " " + line.strip()
        elif current is None:
            lead.append(line)
        else:
            current = None
    return "\n".join(lead), entries


def test_the_install_section_names_exactly_the_extras_of_pyproject() -> None:
    with open(REPO_ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    lead, entries = _install_entries()
    assert set(entries) == set(extras), (
        f"docs/ARCHITECTURE.md's install section lacks the extras {sorted(set(extras) - set(entries))} "
        f"and names extras pyproject.toml does not have: {sorted(set(entries) - set(extras))}"
    )
    problems: list[str] = []
    for extra, requirements in extras.items():
        for spec in requirements:
            name, included = _requirement(spec)
            wanted = [f"`{e}`" for e in included] if name == "wattwise" else [name]
            problems += [
                f"the install section's `{extra}` does not name {w} ({spec})"
                for w in wanted
                if w.lower() not in entries[extra].lower()
            ]
    for spec in project["dependencies"]:
        name, _ = _requirement(spec)
        if name.lower() not in lead.lower():
            problems.append(f"the install section's base install does not name {name} ({spec})")
    assert not problems, "\n".join(problems)


#: Unit-test modules at the top of tests/unit that test no one top-level module of wattwise, and why they are
#: there: every other one is `test_<module>...` of a top-level module, and the tests of a package's modules
#: live in the package's folder (tests/unit/run/, record/, tools/, store/, ...), as the package is laid out.
CROSS_CUTTING_TESTS = {
    "test_adapter_arguments.py": "both adapters' arguments, checked alike",
    "test_docs_reference.py": "the documentation's generated reference",
    "test_hooks_override.py": "every adapter's hooks against its framework's",
    "test_import_graph.py": "the rules between all the layers",
    "test_package_maps.py": "the maps of the whole package",
    "test_readme_commands.py": "the README's commands",
    "test_safe_outputs.py": "every command that writes a file",
    "test_validation.py": "bad input, wherever it comes in",
    "test_version.py": "the package's version, as installed",
    "test_warning_format.py": "how every warning of the package reads",
}


def test_the_unit_tests_follow_the_package_tree() -> None:
    top_modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    unit = REPO_ROOT / "tests" / "unit"
    stray = [
        p.name
        for p in sorted(unit.glob("test_*.py"))
        if p.name not in CROSS_CUTTING_TESTS
        and not any(p.stem == f"test_{m}" or p.stem.startswith(f"test_{m}_") for m in top_modules)
    ]
    assert not stray, (
        f"tests/unit/{', '.join(stray)} test no top-level module of wattwise: move each to the folder of the "
        "package it tests (tests/unit/run/, record/, tools/, ...) or, if it tests the whole package, name it in "
        "CROSS_CUTTING_TESTS with the reason"
    )
    gone = sorted(n for n in CROSS_CUTTING_TESTS if not (unit / n).exists())
    assert not gone, f"CROSS_CUTTING_TESTS names tests that are not there: {gone}"
