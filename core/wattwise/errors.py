"""Errors that reach users.

`UsageError` is bad input (a field, a file, a flag): the CLI prints its one-line message and exits 2.
"""

from __future__ import annotations


class WattwiseError(Exception):
    """Base class of every error wattwise raises on purpose."""


class UsageError(WattwiseError, ValueError):
    """Bad input from the user. The message names the field and the fix."""


class ConfigError(UsageError):
    """A configuration key is unknown, has the wrong type or an invalid value."""
