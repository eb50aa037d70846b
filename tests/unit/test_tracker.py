"""`wattwise.track`: a `with` block or a decorated function measured in three lines, one CSV row per run."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest

import wattwise
from wattwise.errors import EnergyPluginWarning
from wattwise.tracker import COLUMNS


@pytest.fixture(autouse=True)
def _here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WATTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "ideal")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_with_block_is_measured_and_appended_as_one_row(tmp_path: Path) -> None:
    (tmp_path / "proj" / ".git").mkdir(parents=True)
    work = tmp_path / "proj" / "src"
    work.mkdir()
    os.chdir(work)  # anywhere in the repository: its project
    with wattwise.track("train", backend="simulated") as t:
        time.sleep(0.05)
    assert t.energy_j is not None and t.energy_j > 0 and t.time_s is not None and t.time_s >= 0.05
    with wattwise.track("eval", backend="simulated"):
        time.sleep(0.01)
    [first, second] = rows(work / "wattwise_energy.csv")  # one header, one row a run
    assert list(first) == list(COLUMNS)
    assert (first["project"], first["name"], second["name"]) == ("proj", "train", "eval")
    assert float(first["energy_j"]) == pytest.approx(t.energy_j, rel=1e-5)
    assert float(first["energy_kwh"]) == pytest.approx(t.energy_j / 3.6e6, rel=1e-5)
    assert first["simulated"] == "true" and first["devices"] == "gpu0"


def test_a_decorated_function_appends_a_row_per_call(tmp_path: Path) -> None:
    @wattwise.track("step", backend="simulated", project="vision", csv="energy.csv")
    def step(x: int) -> int:
        return x + 1

    assert [step(1), step(2)] == [2, 3]
    assert [(r["project"], r["name"]) for r in rows(tmp_path / "energy.csv")] == [("vision", "step")] * 2


def test_with_nothing_to_measure_the_code_runs_and_its_row_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def nothing(*args: object, **kwargs: object) -> object:
        raise RuntimeError("no backend here")

    monkeypatch.setattr("wattwise.devices.discover", nothing)
    with pytest.warns(EnergyPluginWarning, match="only timed"), wattwise.track("train") as t:
        ran = True
    assert ran and t.energy_j is None
    [row] = rows(tmp_path / "wattwise_energy.csv")
    assert row["energy_j"] == "" and float(row["time_s"]) >= 0
