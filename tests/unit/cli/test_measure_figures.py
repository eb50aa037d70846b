"""`wattwise measure` and a printed `Measurement` give each energy with its uncertainty, and say when the
simulated GPU's ideal physics made the figures exact."""

from __future__ import annotations

import json
import re
import time

import pytest

from wattwise.cli import measure
from wattwise.cli.main import main
from wattwise.monitor import Measurement


@pytest.fixture(autouse=True)
def command_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured command, run in this process: a third of a second of nothing, exit status 0."""

    def run(cmd: list[str], *args: object, **kwargs: object) -> int:
        time.sleep(0.3)
        return 0

    monkeypatch.setattr(measure, "_run_command", run)


def test_measure_prints_each_energy_with_its_uncertainty(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "realistic")
    assert main(["measure", "--backend", "simulated", "--", "true"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    total, device = lines[-2], lines[-1]
    assert re.fullmatch(r"wattwise measure \[SIMULATED GPU: [^]]*\]: 0\.\d{3} s, [\d,.]+ ± [\d.]+ J in total", total)
    assert re.fullmatch(r"  gpu0: [\d,.]+ ± [\d.]+ J", device)


def test_measure_json_gives_the_uncertainties_beside_the_figures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "realistic")
    assert main(["measure", "--backend", "simulated", "--json", "--", "true"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["energy_uncertainty_j"]) == set(result["energy_j"]) == {"gpu0"}
    assert result["total_energy_uncertainty_j"] == pytest.approx(result["energy_uncertainty_j"]["gpu0"])
    assert result["total_energy_uncertainty_j"] > 0


def test_measure_on_the_ideal_physics_says_its_figures_are_exact(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "ideal")
    assert main(["measure", "--backend", "simulated", "--", "true"]) == 0
    total = capsys.readouterr().err.strip().splitlines()[-2]
    assert total.startswith("wattwise measure [SIMULATED GPU, ideal physics (exact figures): ") and "±" not in total


def test_a_printed_measurement_gives_each_figure_to_what_its_uncertainty_resolves() -> None:
    m = Measurement(
        "step",
        0.0,
        1.2345,
        {"gpu0": 125.234, "gpu1": 125.1},
        simulated=True,
        energy_uncertainty_j={"gpu0": 0.4, "gpu1": 0.4},
    )
    assert str(m) == "step: 1.234 s, 250.3 ± 0.6 J (gpu0: 125.2 ± 0.4 J, gpu1: 125.1 ± 0.4 J) [SIMULATED]"
    exact = Measurement("eval", 0.0, 2.0, {"gpu0": 1_234.5678}, approximate=("gpu0",))
    assert str(exact) == "eval: 2.000 s, 1,234.57 J (gpu0: 1,234.57 J approximate)"
