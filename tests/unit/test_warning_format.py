"""wattwise's warning prints as one line naming wattwise and the fix (issue 27); other warnings keep Python's
format. `warnings.formatwarning` is what Python's own `showwarning` calls to print a warning (pytest records
warnings instead of printing them, so the test calls the formatter; tests/integration/cli/test_demo.py reads
a real process's stderr)."""

from __future__ import annotations

import warnings

from wattwise.errors import EnergyPluginWarning, install_warning_format

MESSAGE = "wattwise: setting the power limit failed (no permission); continuing with measurement only"


def shown(message: str, category: type[Warning]) -> str:
    return warnings.formatwarning(
        message, category, "/site-packages/wattwise/run.py", 94, "    return method(self, *args, **kwargs)"
    )


def test_wattwise_warning_is_one_line_without_internal_path_or_source() -> None:
    text = shown(MESSAGE, EnergyPluginWarning)
    assert text == f"EnergyPluginWarning: {MESSAGE}\n"
    assert "run.py" not in text and "return method" not in text


def test_a_message_without_the_prefix_still_names_wattwise_on_one_line() -> None:
    assert shown("the store is down;\nresults are spooled", EnergyPluginWarning) == (
        "EnergyPluginWarning: wattwise: the store is down; results are spooled\n"
    )


def test_other_warnings_keep_pythons_format() -> None:
    text = shown("the user's own warning", UserWarning)
    assert text.startswith("/site-packages/wattwise/run.py:94: UserWarning: the user's own warning\n")
    assert "return method(self, *args, **kwargs)" in text  # Python echoes the source line: unchanged


def test_a_formatter_wrapped_around_wattwises_is_wrapped_in_turn_once(monkeypatch) -> None:
    def lightning_like(message, category, filename, lineno, line=None):  # Lightning's own wrapper
        return f"{filename}:{lineno}: {message}\n"

    monkeypatch.setattr(warnings, "formatwarning", lightning_like)
    assert shown(MESSAGE, EnergyPluginWarning).startswith("/site-packages")  # the library's format won
    install_warning_format()  # what the run does before it warns
    install_warning_format()
    assert shown(MESSAGE, EnergyPluginWarning) == f"EnergyPluginWarning: {MESSAGE}\n"
    assert shown("x", UserWarning) == "/site-packages/wattwise/run.py:94: x\n"  # the library's, as before
