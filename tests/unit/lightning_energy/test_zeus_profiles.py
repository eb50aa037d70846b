"""On Zeus's real A40 power-limit profiles, the callback chooses what the logged windows say.

Each profile file has one window per power limit (same number of steps each): seconds and joules per GPU.
We turn it into one power model per GPU (time relative to the 300 W window, average watts = J / s), let
EnergyCallback profile those simulated GPUs during a Lightning fit, and compare its choice with the Zeus
cost computed straight from the logged windows.
"""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch as pl
import pytest

from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices import PowerModel, SimulatedGPU

BASE_S = 0.01


def read_profile(path: Path) -> tuple[list[float], list[float], list[list[float]]]:
    """(limits W, elapsed s, energy J per GPU) per window."""
    limits, times, energies = [], [], []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            limits.append(float(row["window_name"].rsplit("_", 1)[1]))
            times.append(float(row["elapsed_time"]))
            energies.append([float(v) for k, v in row.items() if k.endswith("_energy")])
    return limits, times, energies


def choice_from_windows(limits, times, energies, eta: float) -> tuple[float, list[float]]:
    """The limit the logged windows' costs choose, as the sweep sees them, and the limits it profiles.

    Highest first; the sweep stops once two limits in a row cost more than the best so far (these figures
    are exact); the least cost wins, a tie going to the higher limit.
    """
    num_gpus = len(energies[0])
    max_power_w = max(limits) * num_gpus
    costs = {w: eta * sum(e) + (1 - eta) * max_power_w * t for w, t, e in zip(limits, times, energies, strict=True)}
    profiled: list[float] = []
    worse = 0
    for w in sorted(costs, reverse=True):
        best = min((costs[p] for p in profiled), default=None)
        profiled.append(w)
        worse = worse + 1 if best is not None and costs[w] > best else 0
        if worse == 2:
            break
    least = min(costs[w] for w in profiled)
    return max(w for w in profiled if costs[w] == least), profiled


def profile_files(shared_data: Path) -> list[Path]:
    files = sorted((shared_data / "zeus-profiles").glob("A40+*.csv"))
    if not files:
        pytest.skip(f"no Zeus A40 profiles under {shared_data / 'zeus-profiles'}")
    return files


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0])
def test_callback_choice_matches_the_cost_of_the_logged_windows(shared_data, tmp_path, virtual_clock, eta):
    for path in profile_files(shared_data):
        limits, times, energies = read_profile(path)
        t_top = times[limits.index(max(limits))]
        order = sorted(range(len(limits)), key=lambda i: limits[i])
        gpus = []
        for g in range(len(energies[0])):
            model = PowerModel(
                power_limits_w=tuple(limits[i] for i in order),
                time_factors=tuple(times[i] / t_top for i in order),
                busy_power_w=tuple(energies[i][g] / times[i] for i in order),
                idle_power_w=60.0,
            )
            gpus.append(SimulatedGPU(g, model, base_step_time_s=BASE_S, clock=virtual_clock, sleep=virtual_clock.sleep))
        cb = EnergyCallback(
            mode="tune",
            selector="cost",
            eta=eta,
            devices=gpus,
            output_dir=str(tmp_path / path.stem / str(eta)),
            overrides=[
                "power_limit.wait_steps=1",
                "power_limit.warmup_steps=1",
                "power_limit.profile_steps=2",
                "monitor.sample_power=false",
            ],
        )
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=1 + 3 * len(limits) + 2,
            max_epochs=-1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            callbacks=[cb],
        )
        trainer.fit(EmulatedModule(gpus=gpus))
        assert cb.summary is not None
        chosen = cb.summary["power_limit"]["chosen_power_limit_w"]
        expected, profiled = choice_from_windows(limits, times, energies, eta)
        assert chosen == expected, path.name
        assert cb.summary["power_limit"]["tuning"]["profiled"] == profiled, path.name
