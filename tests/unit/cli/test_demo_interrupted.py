"""`wattwise demo` stopped by a signal exits 128 + the signal, whatever the framework's clean-up raised on the way out.

Seen once in a full run: SIGTERM reached the demo as its baseline fit started, and Lightning's teardown, before
the fit had iterated its loader, raised "Please call `iter(combined_loader)` first" over the demo's own
interruption; the demo reported a baseline that measured nothing and exited 2 instead of 143.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import pytest

from wattwise.cli import demo as demo_cli
from wattwise.errors import Unavailable


def _signalled_then(error: Exception):
    """A demo whose run receives SIGTERM, and whose framework raises `error` while unwinding from it."""

    def run_demo(options: object) -> dict[str, object]:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the demo's handler raises here, at once
        except BaseException:  # the framework's teardown fails and replaces the interruption
            raise error from None
        raise AssertionError("the signal's handler did not run")

    return run_demo


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("Please call `iter(combined_loader)` first."),  # Lightning's teardown, as it reached the fit
        Unavailable("demo: the baseline run measured nothing"),  # as the demo's run wrapper made of it
    ],
)
def test_a_signal_during_a_run_is_the_exit_whatever_the_clean_up_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception
) -> None:
    monkeypatch.setattr(demo_cli, "run_demo", _signalled_then(error))
    monkeypatch.setattr(demo_cli, "options_of", lambda args: None)
    before = signal.getsignal(signal.SIGTERM)
    assert demo_cli.run(argparse.Namespace(json=False)) == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the process's own handler is back


def test_an_error_with_no_signal_is_still_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_demo(options: object) -> dict[str, object]:
        raise Unavailable("demo: the baseline run measured nothing")

    monkeypatch.setattr(demo_cli, "run_demo", run_demo)
    monkeypatch.setattr(demo_cli, "options_of", lambda args: None)
    with pytest.raises(Unavailable):
        demo_cli.run(argparse.Namespace(json=False))
