"""`wattwise carbon codes`: every code `--intensity` takes from the bundled table can be listed and found."""

from __future__ import annotations

import json

import pytest

from wattwise.carbon.grid import table
from wattwise.carbon.series import INTENSITY, parse_series
from wattwise.cli.main import main


def codes(capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict[str, object]]:
    assert main(["carbon", "codes", "--json", *flags]) == 0
    listed: list[dict[str, object]] = json.loads(capsys.readouterr().out)["codes"]
    return listed


def test_every_code_of_the_table_is_listed_and_is_what_intensity_takes(capsys: pytest.CaptureFixture[str]) -> None:
    listed = codes(capsys)
    assert len(listed) == len(table()) > 250
    for row in listed:
        assert parse_series(str(row["code"]), INTENSITY).value == row["g_per_kwh"]  # type: ignore[union-attr]
    germany = next(row for row in listed if row["code"] == "DE")
    assert germany["name"] == "Germany" and str(germany["source"]).startswith("Our World in Data")


def test_codes_are_listed_by_provider_or_by_a_search(capsys: pytest.CaptureFixture[str]) -> None:
    gcp = codes(capsys, "--provider", "gcp")
    assert gcp and all(str(row["code"]).startswith("gcp:") for row in gcp)
    countries = codes(capsys, "--provider", "country")
    assert countries and all(":" not in str(row["code"]) for row in countries)
    found = {str(row["code"]) for row in codes(capsys, "--search", "GERMANY")}
    assert "DE" in found and "aws:eu-central-1" in found and "FR" not in found


def test_the_table_as_text_has_a_line_per_code_and_names_its_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["carbon", "codes", "--search", "europe-west1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["code", "place", "gCO2e/kWh", "year", "source"]
    assert lines[1].startswith("gcp:europe-west1 ") and lines[1].split()[-1] == "gcp"
    assert lines[-2].startswith("sources: gcp: Google Cloud")
    assert main(["carbon", "codes", "--search", "atlantis"]) == 0
    assert capsys.readouterr().out == "no code matches; `wattwise carbon codes` lists them all\n"


def test_a_bad_provider_or_an_empty_search_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["carbon", "codes", "--provider", "ibm"])
    assert refused.value.code == 2
    assert main(["carbon", "codes", "--search", " "]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("wattwise carbon: error: --search: give some text to look for")
