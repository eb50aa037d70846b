"""A run that only measures imports no store, solver or pipeline machinery.

`python -X importtime -c "import M"` lists every module a fresh interpreter loads for M. SQLAlchemy and
Alembic (the store; Alembic only to create or upgrade one), OR-Tools (the exact frontier solver) and
`torch.distributed.pipelining` (pipeline frequency plans) are loaded only by the code that uses them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Packages a measure-only run must not load.
HEAVY = ("sqlalchemy", "alembic", "ortools", "torch.distributed.pipelining")


def imported_modules(statement: str) -> set[str]:
    """Every module a fresh interpreter imports to run `statement`, from `-X importtime`'s report."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return names - {"imported package"}  # the report's header


def heavy_in(modules: set[str]) -> list[str]:
    """The modules of `HEAVY` packages among `modules`, sorted."""
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "module",
    [
        "wattwise.run",  # every adapter's Run: measurement, power limits, remembered limits
        "wattwise.store",  # the store's interface and factory, before a store is opened
        "wattwise.store.limits_memory",
        "wattwise.recurring",
        "wattwise.run.recurring",
    ],
)
def test_importing_loads_no_store_solver_or_pipeline_package(module: str) -> None:
    # ... nor changes how the process prints warnings: the one-line format comes with wattwise's first one.
    modules = imported_modules(f"import {module}, warnings; assert warnings.formatwarning.__module__ == 'warnings'")
    assert module in modules  # the report was read
    assert heavy_in(modules) == [], f"`import {module}` loads {heavy_in(modules)[:10]}"


def test_opening_a_store_is_what_loads_sqlalchemy_and_only_creating_or_upgrading_one_loads_alembic(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    opening = f"from wattwise.store.sql import SqlJobStore; SqlJobStore({url!r}).close()"
    created = {m.split(".")[0] for m in heavy_in(imported_modules(opening))}
    assert created == {"sqlalchemy", "alembic"}  # a new store: Alembic brings it to the newest revision
    reopened = {m.split(".")[0] for m in heavy_in(imported_modules(opening))}
    assert reopened == {"sqlalchemy"}  # at the newest revision already: one query of its version table
