"""Physical bounds on every figure (`wattwise.bounds`): readers refuse a figure outside with one line naming
the field (issue 27: 1.7e308 J in a frontier, 1e300 W in a trace, a PUE of 1.7e308 passed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from wattwise import bounds
from wattwise.carbon.series import INTENSITY, PRICE, PUE, parse_series
from wattwise.config import load_config
from wattwise.errors import ConfigError, UsageError
from wattwise.pipeline.files import read_frontier_json


@pytest.mark.parametrize("value", [math.inf, math.nan, 1.7e308, -1.0])
def test_a_figure_outside_its_bound_names_the_field_and_the_range(value: float) -> None:
    with pytest.raises(UsageError, match=r"^FRONTIER.json: energy_j must be above 0 and at most 1e\+15 J \(got "):
        bounds.check_field("energy_j", value, "FRONTIER.json")


def test_the_bound_of_a_field_is_the_bound_of_its_unit() -> None:
    assert bounds.for_field("average_power_w") is bounds.POWER_W
    assert bounds.for_field("time_s") is bounds.TIME_S
    assert bounds.check_field("p_blocking_w", 5000, "f") == 5000.0
    with pytest.raises(KeyError, match="name a figure with its unit"):
        bounds.for_field("energy")


@pytest.mark.parametrize(
    ("text", "quantity", "message"),
    [
        ("1.7e308", PUE, r"--pue: PUE must be at most 10 \(got 1.7e\+308\)"),
        ("1e308", INTENSITY, r"--intensity: carbon intensity must be at most 5000 gCO2e/kWh"),
        ("-1e300", PRICE, r"--price: electricity price must be at most 1e\+06 per kWh"),
    ],
)
def test_a_facility_input_beyond_any_real_one_is_refused(text: str, quantity, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_series(text, quantity)


def test_real_facility_inputs_pass() -> None:
    assert parse_series("1.58", PUE).value == 1.58  # type: ignore[union-attr]
    assert parse_series("1100", INTENSITY).value == 1100.0  # type: ignore[union-attr]
    assert parse_series("-0.05", PRICE).value == -0.05  # type: ignore[union-attr]


def frontier(tmp_path: Path, energy_j: float) -> Path:
    path = tmp_path / "FRONTIER.json"
    path.write_text(
        json.dumps(
            {
                "schedule": "1f1b",
                "stages": 1,
                "microbatches": 1,
                "unit_time_s": 0.001,
                "p_blocking_w": 60.0,
                "max_frequency": {"time_s": 1.0, "energy_j": 100.0},
                "points": [
                    {"time_s": 1.0, "energy_j": energy_j, "plan": [[["forward", 0, 1410], ["backward", 0, 1410]]]}
                ],
            }
        )
    )
    return path


def test_a_frontier_point_with_an_absurd_energy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        UsageError,
        match=r"points\[0\]: energy_j must be above 0 and at most 1e\+15 J "
        r"\(got 1.7e\+308\); check the unit",
    ):
        read_frontier_json(frontier(tmp_path, 1.7e308))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["devices.gpus=[-1]"], r"devices.gpus must list distinct GPU indices from 0"),
        (["devices.gpus=[0,0]"], r"devices.gpus must list distinct GPU indices from 0"),
        (
            ["devices.backend=simulated", "devices.gpus=[5]"],
            r"devices.gpus asks for GPU 5, but the simulated GPUs are 0 to 0 \(devices.simulated.num_gpus=1\)",
        ),
    ],
)
def test_gpu_indices_that_name_no_gpu_are_refused(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides)


def test_simulated_gpu_indices_within_the_count_pass() -> None:
    cfg = load_config(overrides=["devices.backend=simulated", "devices.simulated.num_gpus=2", "devices.gpus=[1]"])
    assert cfg.devices.gpus == [1]
