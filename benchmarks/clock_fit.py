"""Fit the simulated GPU's clock curve to measured profiles: the parameters of `devices/simulated/presets.py`.

Busy power above idle against the relative SM clock `x = f / f_max` is `S * (a * x + (1 - a) * ((x - x_t) /
(1 - x_t)) ** k)` (the second term above `x_t` only), and step time is `m + (1 - m) / x`. Fitted by least
squares to:

- the Perseus SOSP'24 artifact's per-stage profiles (`stage_profile/<model>+<gpu>_bf16.csv`, Apache 2.0),
  summed over the 8 stages, power above the artifact's blocking power (83.64 W on A100, 70.38 W on A40);
  on the A40 only below 1470 MHz, where its 300 W limit does not hold the power flat;
- the H100 report's three locked-clock points (docs/acceptance/h100-2026-11-25.md: 345 MHz 192 W,
  1155 MHz 510 W, 1980 MHz held at the 700 W limit, which ran at the speed of 1373 MHz), with the A100's
  exponent and idle a tenth of the power at the maximum clock (three points fix three parameters).

    python benchmarks/clock_fit.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import collections
import csv
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

PERSEUS = {
    "a100": ("gpt3-175b+a100_sxm_bf16.csv", 83.64, 1410, 10_000),
    "a40": ("bloom+a40_bf16.csv", 70.38, 1740, 1470),
}


def curve(x: np.ndarray, linear: float, transition: float, exponent: float) -> np.ndarray:
    rising = np.clip((x - transition) / (1.0 - transition), 0.0, None) ** exponent
    return linear * x + (1.0 - linear) * rising


def perseus(path: Path, idle_w: float, max_mhz: int, below_mhz: int) -> dict[str, float]:
    rows = collections.defaultdict(lambda: [0.0, 0.0])
    with path.open() as fh:
        for row in csv.DictReader(fh):
            rows[int(row["frequency"])][0] += float(row["time"])
            rows[int(row["frequency"])][1] += float(row["energy"])
    mhz = np.array(sorted(rows, reverse=True), dtype=float)
    time_s = np.array([rows[int(f)][0] for f in mhz])
    energy_j = np.array([rows[int(f)][1] for f in mhz])
    x, power_w = mhz / max_mhz, energy_j / time_s
    used = mhz <= below_mhz
    fit = least_squares(
        lambda p: (p[2] * curve(x[used], p[0], p[1], p[3]) - (power_w[used] - idle_w)) / 100,
        [0.5, 0.6, 400.0, 2.0],
        bounds=([0, 0, 100, 1], [1, 0.95, 2000, 6]),
    )
    memory = least_squares(lambda p: (p[0] + (1 - p[0]) / x - time_s / time_s[0])[used], [0.3], bounds=([0], [1]))
    return {
        "linear_share": fit.x[0],
        "transition": fit.x[1],
        "power_exponent": fit.x[3],
        "rms_w": float(np.sqrt(np.mean(fit.fun**2)) * 100),
        "memory_bound_fraction": memory.x[0],
        "cheapest_mhz": float(mhz[np.argmin(energy_j)]),
    }


def h100(exponent: float, idle_share: float = 0.10) -> dict[str, float]:
    x = np.array([1155 / 1980, 345 / 1980, 1155 * 15.1 / 12.7 / 1980])
    power_w = np.array([510.0, 192.0, 700.0])

    def residual(p: np.ndarray) -> np.ndarray:
        scale, linear, transition = p
        idle = idle_share / (1 - idle_share) * scale
        return (idle + scale * curve(x, linear, transition, exponent) - power_w) / 10

    fit = least_squares(residual, [800.0, 0.6, 0.5], bounds=([100, 0.05, 0.05], [5000, 1, 0.95]))
    return {"linear_share": fit.x[1], "transition": fit.x[2], "power_exponent": exponent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    fitted = {}
    for gpu, (name, idle_w, max_mhz, below) in PERSEUS.items():
        fitted[gpu] = perseus(args.data / "perseus" / "stage_profile" / name, idle_w, max_mhz, below)
    fitted["h100"] = h100(fitted["a100"]["power_exponent"])
    for gpu, params in fitted.items():
        print(gpu, ", ".join(f"{k} {v:.3f}" for k, v in params.items()))


if __name__ == "__main__":
    main()
