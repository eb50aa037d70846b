"""The errors wattwise raises on purpose, and the warning it gives when it degrades instead.

Three kinds, because each reaches the user differently:

- `UsageError` (and `ConfigError`): the user's mistake (a field, a file, a flag, an argument). Refused
  before training starts; the CLI prints its one-line message and exits 2.
- `InternalError`: wattwise's own bookkeeping is not in the state a call expects (a fault of wattwise, or
  of code that drives its parts directly). During training it degrades with one warning.
- `Unavailable`: something wattwise relies on cannot be reached or used now (a device, the job store, the
  node agent). During training it degrades with one warning; at the CLI it is one line and exit 2.

`EnergyPluginWarning` is the one warning wattwise gives when it degrades instead of breaking training. It
prints as one line, `EnergyPluginWarning: wattwise: <what happened and the fix>`, without Python's internal
path and echoed source line; other warnings keep Python's format (`warnings.formatwarning` delegates to the
one it replaced).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable


class WattwiseError(Exception):
    """Base class of every error wattwise raises on purpose."""


class UsageError(WattwiseError, ValueError):
    """Bad input from the user. The message names the field and the fix."""


class ConfigError(UsageError):
    """A configuration key is unknown, has the wrong type or an invalid value."""


class InternalError(WattwiseError, RuntimeError):
    """wattwise's own state is not what a call expects, e.g. a measurement window that is not open.

    Not the user's input: during training the run degrades with one warning instead of stopping.
    """


class Unavailable(WattwiseError):
    """A device, the job store or the node agent cannot be reached or used now.

    The message names what is unavailable and what to do; during training the run degrades with one
    warning instead of stopping.
    """


class EnergyPluginWarning(UserWarning):
    """wattwise degraded (e.g. to measurement only) instead of breaking training."""


def one_line_warning(message: Warning | str) -> str:
    """The one line an `EnergyPluginWarning` prints: its category, wattwise, what happened and the fix."""
    text = " ".join(str(message).split("\n"))
    return f"{EnergyPluginWarning.__name__}: {text if text.startswith('wattwise') else 'wattwise: ' + text}\n"


_FormatWarning = Callable[[Warning | str, type[Warning], str, int, str | None], str]
#: The formatters `install_warning_format` installed (one per time another library wrapped ours).
_OURS: list[_FormatWarning] = []


def install_warning_format() -> None:
    """Print `EnergyPluginWarning` as one line (`one_line_warning`), every other warning as before.

    Wraps `warnings.formatwarning` unless the outermost formatter is already one of ours: a library that
    wraps it after wattwise was imported (Lightning prints its own package's warnings as `path:line:
    message`) is wrapped in turn, so the run calls this again before it warns. Cheap when nothing changed.
    """
    current = warnings.formatwarning
    if current in _OURS:
        return

    def format_warning(
        message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
    ) -> str:
        if isinstance(category, type) and issubclass(category, EnergyPluginWarning):
            return one_line_warning(message)
        return current(message, category, filename, lineno, line)

    _OURS.append(format_warning)
    warnings.formatwarning = format_warning


def plugin_warning(message: str, *, stacklevel: int = 1) -> None:
    """Warn with an `EnergyPluginWarning`, printed as one line (`install_warning_format`).

    The format is installed the first time wattwise has something to say, not when it is imported: a
    process that imports wattwise and never hears from it keeps Python's formatter as it was.

    Args:
        message: What happened and the fix, starting with "wattwise: ".
        stacklevel: As `warnings.warn`'s, counted from the caller of this function.
    """
    install_warning_format()
    warnings.warn(message, EnergyPluginWarning, stacklevel=stacklevel + 1)
