"""Carbon where users look: the run's page (dashboard and `report --html`) gives its emissions with the
intensity used, a report made again keeps the facility inputs its statement was made with, and figures
read as people read them."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests.support.run_records import write_tuned_run
from wattwise import readable
from wattwise.cli.main import main
from wattwise.dashboard import pages
from wattwise.record.files import read_run_dir


def facts(page: str) -> dict[str, str]:
    """The table of facts of a run's page, as text."""
    rows = re.findall(r"<tr><th>([^<]*)</th><td>(.*?)</td></tr>", page)
    return {html.unescape(label): html.unescape(value) for label, value in rows}


def test_a_report_made_again_for_its_html_keeps_the_pue_and_intensity_of_its_statement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_tuned_run(tmp_path / "run")
    assert main(["report", str(run), "--pue", "1.2", "--pue-source", "our meter", "--intensity", "DE"]) == 0
    statement = (run / "energy_statement.md").read_text()
    capsys.readouterr()
    page = tmp_path / "page.html"
    assert main(["report", str(run), "--html", str(page)]) == 0
    assert (run / "energy_statement.md").read_text() == statement  # the same figures, the same sources
    (kept,) = [line for line in capsys.readouterr().err.splitlines() if "kept" in line]
    assert kept.startswith("wattwise report: kept --pue 1.2 (our meter); --intensity 381 gCO2e/kWh (Germany (DE)")
    assert kept.endswith(f"the report already in {run} was made with them (give --pue or --intensity to change)")
    shown = facts(page.read_text())
    assert shown["facility energy"] == "30,000.0 J (PUE 1.2; our meter)"  # 25 kJ at the GPUs, times 1.2
    assert re.fullmatch(
        r"3\.2 g CO2e \(at 381 gCO2e/kWh; Germany \(DE\), 20\d\d yearly average: .*\)", shown["emissions"]
    )


def test_intensity_given_anew_replaces_the_earlier_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_tuned_run(tmp_path / "run")
    assert main(["report", str(run), "--intensity", "DE"]) == 0
    assert main(["report", str(run), "--intensity", "100", "--json"]) == 0
    out = capsys.readouterr()
    assert "kept" not in out.err and '"intensity_source": "constant --intensity 100"' in out.out


def test_the_dashboards_run_page_gives_emissions_at_the_intensity_set_and_how_to_set_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = read_run_dir(write_tuned_run(tmp_path / "run"))
    monkeypatch.delenv("WATTWISE_INTENSITY", raising=False)
    assert facts(pages.run_page(run, pages.SERVED, title="run"))["emissions"] == pages.NO_INTENSITY
    monkeypatch.setenv("WATTWISE_INTENSITY", "400")
    shown = facts(pages.run_page(run, pages.SERVED, title="run"))
    assert shown["emissions"] == "2.8 g CO2e (at 400 gCO2e/kWh; constant WATTWISE_INTENSITY 400)"  # 25 kJ x 400 g/kWh
    assert shown["facility energy"].endswith("(no PUE given: taken as the IT energy, a lower bound)")


def test_a_bad_intensity_says_so_on_the_page_instead_of_failing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = read_run_dir(write_tuned_run(tmp_path / "run"))
    monkeypatch.setenv("WATTWISE_INTENSITY", "XX")
    shown = facts(pages.run_page(run, pages.SERVED, title="run"))
    assert shown["emissions"].startswith("not estimated: WATTWISE_INTENSITY: 'XX' is not in wattwise's table")


@pytest.mark.parametrize(
    ("kg", "text"),
    [
        (0.0007473, "0.75 g CO2e"),
        (0.0123, "12 g CO2e"),
        (0.462, "462 g CO2e"),
        (12.53, "13 kg CO2e"),
        (3400.0, "3.4 t CO2e"),
    ],
)
def test_emissions_read_in_grams_kilograms_or_tonnes(kg: float, text: str) -> None:
    assert readable.emissions(kg) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0123, "0.0123 s"), (45.2, "45.2 s"), (71.6, "1.2 min"), (0.0199 * 3600, "1.2 min"), (3 * 3600, "3.0 h")],
)
def test_durations_read_in_the_unit_their_size_calls_for(seconds: float, text: str) -> None:
    assert readable.duration(seconds) == text


def test_a_figure_with_its_uncertainty_keeps_the_digits_the_uncertainty_resolves() -> None:
    assert readable.with_uncertainty(12_345.678, 1.234, "J", grouped=True) == "12,345.7 ± 1.2 J"
    assert readable.emissions(0.2400, 0.0004) == "240.0 ± 0.4 g CO2e"
    assert readable.with_uncertainty(5.0, None, "J") == "5.0 J"


def test_a_comparison_gives_each_runs_emissions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.run_history import make_row

    monkeypatch.setenv("WATTWISE_INTENSITY", "400")
    run = read_run_dir(write_tuned_run(tmp_path / "run"))
    rows = [make_row("20261201T100000Z-aaaaaa"), make_row("20261201T110000Z-bbbbbb")]
    page = html.unescape(pages.compare_page(rows, [run, None]))
    (emissions,) = re.findall(r"<tr>\s*<th>emissions</th>(.*?)</tr>", page, re.S)
    cells = re.findall(r"<td>(.*?)</td>", emissions, re.S)
    assert cells == [
        "2.8 g CO2e (at 400 gCO2e/kWh; constant WATTWISE_INTENSITY 400)",
        "not estimated: its folder is gone",
    ]
