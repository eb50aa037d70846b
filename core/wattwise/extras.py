"""Optional dependencies: which extra of `pip install 'wattwise[EXTRA]'` brings each one.

The base install is what measuring and the node agent's clients need (NVML, OmegaConf). The rest comes
with an extra: the agent's server (`agent`: aiohttp, prometheus-client), a training run's record and the
run history and job store (`store`: NumPy, SQLAlchemy, Alembic; every training extra brings it), the
framework adapters (`lightning`, `accelerate`: torch and the framework), the pipeline frequency planner
(`pipeline`: OR-Tools, SciPy), plots (`plots`), PostgreSQL (`postgres`) and the dashboard (`dashboard`:
Plotly, aiohttp, Jinja2); `all` is every one of them. A module that needs one imports it through `require`
(or turns the `ModuleNotFoundError` into `MissingExtra` with `missing_extra`), so using it without the
extra fails with one line that names the extra, never a bare `ModuleNotFoundError`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from wattwise.errors import Unavailable

#: Top-level module -> (the distribution pip installs, the extra that brings it).
EXTRA_OF: dict[str, tuple[str, str]] = {
    "aiohttp": ("aiohttp", "agent"),
    "numpy": ("numpy", "store"),
    "sqlalchemy": ("SQLAlchemy", "store"),
    "alembic": ("alembic", "store"),
    "prometheus_client": ("prometheus-client", "agent"),
    "lightning": ("lightning", "lightning"),
    "accelerate": ("accelerate", "accelerate"),
    "torch": ("torch", "lightning"),
    "ortools": ("ortools", "pipeline"),
    "scipy": ("scipy", "pipeline"),
    "matplotlib": ("matplotlib", "plots"),
    "psycopg": ("psycopg", "postgres"),
    "plotly": ("plotly", "dashboard"),
    "jinja2": ("jinja2", "dashboard"),
}


class MissingExtra(Unavailable, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    An `ImportError`, so code that tries an import and goes on without it still does; an `Unavailable`,
    so the command line prints it as one line (exit 2) and a training run degrades with one warning.
    """


def install_hint(extra: str) -> str:
    """The command that installs `extra`, from an index or in a clone of wattwise.

    Args:
        extra: the name in `pip install 'wattwise[EXTRA]'`.

    Returns:
        Both commands, as one phrase.
    """
    return f"pip install 'wattwise[{extra}]' (in a clone of wattwise: pip install '.[{extra}]')"


def missing_extra(err: ModuleNotFoundError, what: str, extra: str | None = None) -> ImportError:
    """The one-line error for `what` when the import behind it failed with `err`.

    Args:
        err: the failed import; its `name` says which module is missing.
        what: what the user asked for, e.g. "`wattwise agent serve`" or "lightning_energy".
        extra: the extra to name; by default the one `EXTRA_OF` gives for the missing module.

    Returns:
        A `MissingExtra` naming the extra, or `err` itself when the missing module is none of the optional
        dependencies (a broken install is not a missing extra, and keeps its own message).
    """
    top = (err.name or "").split(".")[0]
    if top not in EXTRA_OF:
        return err
    package, default_extra = EXTRA_OF[top]
    chosen = extra or default_extra
    return MissingExtra(f"{what} needs {package}, which is not installed: {install_hint(chosen)}", name=err.name)


def require(module: str, what: str, extra: str | None = None) -> ModuleType:
    """Import an optional dependency, or fail with one line naming the extra that brings it.

    Args:
        module: the module to import, e.g. "aiohttp" or "ortools.sat.python.cp_model".
        what: what needs it, as the message names it.
        extra: the extra to name; by default the one `EXTRA_OF` gives for the module.

    Returns:
        The module.

    Raises:
        MissingExtra: the module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise missing_extra(err, what, extra) from None
