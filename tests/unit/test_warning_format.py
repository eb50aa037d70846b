"""wattwise's warning prints as one line naming wattwise and the fix (issue 27); other warnings keep Python's
format. `warnings.formatwarning` is what Python's own `showwarning` calls to print a warning (pytest records
warnings instead of printing them, so the test calls the formatter; tests/integration/cli/test_demo.py reads
a real process's stderr)."""

from __future__ import annotations

import warnings

import wattwise.errors
from wattwise.errors import EnergyPluginWarning

MESSAGE = "wattwise: setting the power limit failed (no permission); continuing with measurement only"


def shown(message: str, category: type[Warning]) -> str:
    return warnings.formatwarning(message, category, "/site-packages/wattwise/run.py", 94,
                                  "    return method(self, *args, **kwargs)")


def test_wattwise_warning_is_one_line_without_internal_path_or_source() -> None:
    text = shown(MESSAGE, EnergyPluginWarning)
    assert text == f"EnergyPluginWarning: {MESSAGE}\n"
    assert "run.py" not in text and "return method" not in text


def test_a_message_without_the_prefix_still_names_wattwise_on_one_line() -> None:
    assert shown("the store is down;\nresults are spooled", EnergyPluginWarning) == (
        "EnergyPluginWarning: wattwise: the store is down; results are spooled\n")


def test_other_warnings_keep_pythons_format() -> None:
    text = shown("the user's own warning", UserWarning)
    assert text.startswith("/site-packages/wattwise/run.py:94: UserWarning: the user's own warning\n")
    assert "return method(self, *args, **kwargs)" in text  # Python echoes the source line: unchanged


def test_importing_wattwise_again_keeps_one_wrapper() -> None:
    import importlib

    before = warnings.formatwarning
    importlib.reload(wattwise.errors)
    assert warnings.formatwarning is before
    assert shown("x", UserWarning).startswith("/site-packages/wattwise/run.py:94: UserWarning: x")
