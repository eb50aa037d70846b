"""A run that only measures imports no store, solver or pipeline machinery.

`python -X importtime -c "import M"` lists every module a fresh interpreter loads for M. SQLAlchemy and
Alembic (the store), OR-Tools (the exact frontier solver) and `torch.distributed.pipelining` (pipeline
frequency plans) are loaded only by the code that uses them.
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


def test_opening_a_store_is_what_loads_sqlalchemy_and_alembic() -> None:
    modules = imported_modules("import wattwise.store.sql")
    assert {"sqlalchemy", "alembic"} <= {m.split(".")[0] for m in heavy_in(modules)}
