"""The errors wattwise raises on purpose, and the warning it gives when it degrades instead.

Three kinds, because each reaches the user differently:

- `UsageError` (and `ConfigError`): the user's mistake (a field, a file, a flag, an argument). Refused
  before training starts; the CLI prints its one-line message and exits 2.
- `InternalError`: wattwise's own bookkeeping is not in the state a call expects (a fault of wattwise, or
  of code that drives its parts directly). During training it degrades with one warning.
- `Unavailable`: something wattwise relies on cannot be reached or used now (a device, the job store, the
  node agent). During training it degrades with one warning; at the CLI it is one line and exit 2.

`EnergyPluginWarning` is the one warning wattwise gives when it degrades instead of breaking training.
"""

from __future__ import annotations


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
