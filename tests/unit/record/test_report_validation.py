"""`wattwise report` validates the summary.json it reads: what no run can hold is refused with one line naming
the field (exit 2, no traceback, nothing written); what is merely odd is reported and said on stderr."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wattwise.carbon.example import write_example
from wattwise.cli.main import main


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_example(tmp_path / "example").run_dir


def edit(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / "summary.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(time_s=0), "time_s must be above 0"),
        (lambda d: d.update(time_s=1e15), "time_s must be above 0 and at most 1e+09 s"),
        (lambda d: d.update(devices=[{"index": 0, "name": 5}]), "devices[0].name must be a device's model name"),
        (lambda d: d["power_limit"].update(chosen_power_limit_w=1e9), "power_limit.chosen_power_limit_w must be"),
        (lambda d: d["power_limit"].update(eta=5), "power_limit.eta must be from 0 to 1 (got 5"),
        (lambda d: d["power_limit"].update(mode="bogus"), "power_limit.mode must be cap or tune (got 'bogus')"),
        (lambda d: d["settings_timeline"][0].update(timestamp=1e15), "settings_timeline[0].timestamp must be"),
        (lambda d: d.update(hostname="node\x1b[2J"), "hostname must be printable text"),
        (lambda d: d.update(energy_per_device_j={"gpu\x1b]8;;": 1.0}), "energy_per_device_j must be keyed by"),
        (lambda d: d.update(notes=["fine", "\x1b]8;;http://x\x07click\x1b]8;;\x07"]), "notes[1] must be text without"),
    ],
)
def test_an_impossible_summary_is_one_line_naming_the_field(
    run_dir: Path, change: Callable[[dict[str, Any]], None], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(run_dir, change)
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "summary.json" in err and "Traceback" not in err
    assert not (run_dir / "report.json").exists()


def test_an_odd_summary_is_reported_and_marked(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit(run_dir, lambda d: d.update(time_s=d["time_s"] * 2))
    assert main(["report", str(run_dir), "--json"]) == 0
    out, err = capsys.readouterr()
    (odd,) = json.loads(out)["odd"]
    assert odd.startswith("time_s ") and "differs from end_time - start_time" in odd
    assert f"wattwise report: odd: {odd}" in err


def test_a_sound_summary_has_nothing_odd(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["odd"] == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--intensity", ""], "--intensity is empty; give a value, or leave --intensity out"),
        (["--pue", "  "], "--pue is empty"),
        (["--intensity", "300", "--intensity-source", "grid\nInjected: line"], "--intensity-source must be one line"),
        (["--pue", "1.1", "--pue-source", "site\r\n## Heading"], "--pue-source must be one line"),
        (["--region", "eu\x1b[2J"], "--region must be one line of printable text"),
    ],
)
def test_an_empty_or_multi_line_text_flag_is_one_line_and_exit_2(
    run_dir: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(run_dir), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err
    assert not (run_dir / "energy_statement.md").exists()


def test_html_in_a_hostname_or_a_flag_is_shown_not_rendered_in_the_statement(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    edit(run_dir, lambda d: d.update(hostname="<img src=x onerror=alert(1)>"))
    assert main(["report", str(run_dir), "--region", "eu <b>west</b>"]) == 0
    statement = (run_dir / "energy_statement.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in statement and "eu &lt;b&gt;west&lt;/b&gt;" in statement
    assert "<img" not in statement and "<b>" not in statement
    capsys.readouterr()
