"""The errors wattwise raises on purpose, and the warning it gives when it degrades instead.

Three kinds, because each reaches the user differently:

- `UsageError` (and `ConfigError`): the user's mistake (a field, a file, a flag, an argument). Refused
  before training starts; the CLI prints its one-line message and exits 2.
- `InternalError`: wattwise's own bookkeeping is not in the state a call expects (a fault of wattwise, or
  of code that drives its parts directly). During training it degrades with one warning.
- `Unavailable`: something wattwise relies on cannot be reached or used now (a device, the job store, the
  node agent). During training it degrades with one warning; at the CLI it is one line and exit 2.

A message is text and `Key`s, the settings it names (`power_limit.eta`, an option's field): each entry
point shows a key under its own name through `WattwiseError.message(names)`, so the same error reads
`--eta must be ...` on the command line and `ACCELERATE_ENERGY_ETA must be ...` for a flag.

`EnergyPluginWarning` is the one warning wattwise gives when it degrades instead of breaking training. It
prints as one line, `EnergyPluginWarning: wattwise: <what happened and the fix>`, without Python's internal
path and echoed source line; other warnings keep Python's format (`warnings.formatwarning` delegates to the
one it replaced).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True)
class Key:
    """A setting named in an error message: a config key (`power_limit.eta`), a variable or an option.

    Each entry point shows it under its own name (`--eta`, `ACCELERATE_ENERGY_ETA`); `shown` is how it
    reads where none renames it (`name` if None).
    """

    name: str
    shown: str | None = None

    def __str__(self) -> str:
        return self.name if self.shown is None else self.shown


#: One piece of a message: text, or a setting it names.
Part = str | Key
_E = TypeVar("_E", bound="WattwiseError")


class WattwiseError(Exception):
    """Base class of every error wattwise raises on purpose.

    Its message is `parts`, text and the settings it names (`Key`); `str(err)` shows every setting as it
    is named in code (its config key), `message(names)` as an entry point names it.
    """

    def __init__(self, *parts: Part, **builtin: Any) -> None:
        """`builtin`: keyword arguments of a built-in exception mixed in (`ImportError`'s `name`)."""
        self.parts: tuple[Part, ...] = parts
        super().__init__(self.message(), **builtin)

    @property
    def keys(self) -> tuple[str, ...]:
        """The settings the message names, in order: the first is the one at fault."""
        return tuple(p.name for p in self.parts if isinstance(p, Key))

    def message(self, names: Mapping[str, str] | None = None) -> str:
        """The one-line message with each setting in `names` (setting -> its name here) renamed."""
        names = names or {}
        return "".join(names.get(p.name, str(p)) if isinstance(p, Key) else p for p in self.parts)

    def renamed(self: _E, names: Mapping[str, str]) -> _E:
        """The same error with the settings in `names` renamed, still as settings a caller may rename again.

        An entry point that hands the error on (the demo to the command line) renames what it knows.
        """
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.parts = tuple(Key(names[p.name]) if isinstance(p, Key) and p.name in names else p for p in self.parts)
        new.args = (new.message(),)
        return new


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
