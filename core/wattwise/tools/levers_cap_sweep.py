"""Lever 1, `cap_sweep` (McDonald et al. 2022): train at caps from the default limit down to the minimum.

Per cap, the time and energy of a training step relative to the default limit, beside the paper's V100
row (150 W of 250 W: 108.5% of the time, 87.7% of the energy); each cap's window spans at least
`MIN_COUNTER_UPDATES` updates of the energy counter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wattwise.devices.base import Device, DeviceError, NoPermissionError
from wattwise.tools.checks import markdown_table
from wattwise.tools.levers_common import MCDONALD_V100, Sizes, label, same_limit
from wattwise.tools.levers_figures import CapRow, CapSweepFigures, CapWindow
from wattwise.tools.levers_rig import Rig

if TYPE_CHECKING:
    from wattwise.tools.checks import Context

#: NVML workload power profiles the sweep measures as one more baseline, the first the GPU offers.
SWEEP_PROFILES = ("training", "llm_training", "max_q")


def cap_caps_w(min_w: float, default_w: float, count: int) -> list[float]:
    """`count` caps from the default limit down to the minimum, evenly spaced, in whole watts."""
    if count < 2 or default_w <= min_w:
        return [float(round(default_w))]
    step = (default_w - min_w) / (count - 1)
    return [float(round(default_w - i * step)) for i in range(count)]


def cap_rows(windows: Sequence[CapWindow], default_w: float, *, base: CapWindow | None = None) -> list[CapRow]:
    """The sweep's rows, highest cap first, each relative to the default limit's window (which must be one).

    The energy ratio's uncertainty combines both windows' relative uncertainties in quadrature. `base`: the
    window the rows are relative to, when it is not among `windows` (a profile's row against the sweep's).
    """
    base = base or next((w for w in windows if same_limit(w.cap_w, default_w) and w.profile is None), None)
    if base is None:
        raise ValueError(f"the sweep has no row at the default limit {default_w:g} W")
    rows: list[CapRow] = []
    for w in sorted(windows, key=lambda w: -w.cap_w):
        ratio = w.energy_j / base.energy_j
        row: CapRow = {
            "cap_w": w.cap_w,
            "cap_fraction": w.cap_w / default_w,
            "step_time_s": w.time_s,
            "step_energy_j": w.energy_j,
            "step_energy_uncertainty_j": w.energy_uncertainty_j,
            "avg_power_w": w.energy_j / w.time_s if w.time_s > 0 else math.nan,
            "time_ratio": w.time_s / base.time_s,
            "energy_ratio": ratio,
            "energy_ratio_uncertainty": ratio
            * math.hypot(w.energy_uncertainty_j / w.energy_j, base.energy_uncertainty_j / base.energy_j),
            "steps": w.steps,
        }
        if w.profile is not None:
            row["profile"] = w.profile
        rows.append(row)
    return rows


def cap_table(figures: CapSweepFigures) -> list[str]:
    """Markdown: the sweep beside the paper's row, as in McDonald et al.'s Figure 1."""
    paper, measured = figures["paper"], label(figures)
    lines = [
        f"Time and energy per training step relative to the default limit ({figures['default_w']:g} W), "
        f"{measured} on {figures['gpu']}; the paper's row is {paper['source']} ({paper['model']} on a "
        f"{paper['gpu']}).",
        "",
    ]
    cells: list[list[str]] = []
    for row in [*figures["rows"], *figures.get("profile_rows", [])]:
        spread = row.get("energy_ratio_uncertainty")
        pm = f" ± {spread * 100:.1f}" if spread else ""
        who = f"{measured}, profile `{row['profile']}`" if row.get("profile") else measured
        cells.append(
            [
                who,
                f"{row['cap_w']:g}",
                f"{row['cap_fraction']:.0%}",
                f"{row['time_ratio']:.1%}",
                f"{row['energy_ratio']:.1%}{pm}",
                f"{row['avg_power_w']:.0f}",
            ]
        )
    cells.append(
        [
            f"paper, {paper['gpu']}",
            f"{paper['cap_w']:g}",
            f"{paper['cap_w'] / paper['default_w']:.0%}",
            f"{paper['time_ratio']:.1%}",
            f"{paper['energy_ratio']:.1%}",
            "",
        ]
    )
    header = ["", "cap (W)", "cap / default", "time", "energy", "mean power (W)"]
    lines += markdown_table(header, cells)
    lines += ["", f"Workload power profiles: {figures['workload_power_profiles']}"]
    return lines


def sweep_profile(gpu: Device) -> tuple[str | None, str]:
    """The NVML workload power profile the sweep adds as a baseline (None: none), and one line saying so."""
    if gpu.simulated:
        return None, "not measured: the simulated GPU has no workload power profiles"
    try:
        offered = gpu.workload_power_profiles()
    except DeviceError as err:
        return None, f"not offered here: {err}"
    chosen = next((name for name in SWEEP_PROFILES if name in offered), None)
    if chosen is None:
        return None, (
            f"not measured: this GPU offers {', '.join(offered) or 'none'}, none of {', '.join(SWEEP_PROFILES)}"
        )
    return chosen, (
        f"NVML's `{chosen}` profile measured at the default limit (the row marked profile), one of the "
        f"profiles this GPU offers: {', '.join(offered)}"
    )


def estimate_cap_sweep_s(gpu: Device, sizes: Sizes, setup_s: float) -> float:
    """About how long the sweep takes: each cap, and the workload power profile the GPU offers, after set-up."""
    windows = sizes.caps + (sweep_profile(gpu)[0] is not None)
    # Each window's ends wait for a change of the counter: about a period in all.
    return setup_s + windows * (sizes.settle_s + sizes.window_s(gpu) + gpu.energy_update_period_s)


def check_cap_sweep(ctx: Context) -> CapSweepFigures:
    """Lever 1: train at caps from the default limit down to the minimum; time and energy relative to default.

    Raises:
        Skip: no GPU, torch or transformers, or the driver refused the power limit (its words).
        Failure: the energy counter did not advance, or the lowest cap did not slow the training.
    """
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import Failure, Skip

    rig = Rig.of(ctx)
    from wattwise.tools.levers_training import SweepCallback  # transformers, which Rig.of found

    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    rng = gpu.power_limit_range()
    caps = cap_caps_w(rng.min_w, rng.default_w, sizes.caps)
    results: list[CapWindow] = []
    profile, profile_note = sweep_profile(gpu)
    refused: list[str] = []
    with SettingsGuard() as guard:
        guard.install_signal_handlers()
        sweep = SweepCallback(gpu, rig.sync, guard, caps, sizes, results, profile, refused)
        try:
            rig.trainer(ctx.out / "levers" / "cap_sweep", [sweep]).train()
        except NoPermissionError as err:
            raise Skip(f"setting the power limit was refused; the driver said: {err}") from None
        finally:
            sweep.close()
    capped = [w for w in results if w.profile is None]
    if len(capped) < len(caps):
        raise Failure(f"the sweep measured {len(capped)} of {len(caps)} caps")
    rows = cap_rows(capped, caps[0])
    base = next(w for w in capped if same_limit(w.cap_w, caps[0]))
    profile_rows = cap_rows([w for w in results if w.profile is not None], caps[0], base=base)
    if refused:
        profile_note = f"not measured: requesting NVML's `{profile}` profile was refused ({refused[0]})"
    figures: CapSweepFigures = {
        "gpu": gpu.name,
        "simulated": gpu.simulated,
        "model": rig.model.describe(),
        "default_w": caps[0],
        "min_w": rng.min_w,
        "max_w": rng.max_w,
        "window_s": sizes.window_s(gpu),
        "energy_update_period_s": gpu.energy_update_period_s,
        "rows": rows,
        "paper": dataclasses.asdict(MCDONALD_V100),
        "workload_power_profiles": profile_note,
        "profile_rows": profile_rows,
    }
    if any(not r["step_energy_j"] > 0 for r in rows):
        raise Failure("the energy counter did not advance in a window of the sweep", figures)
    if not rows[-1]["time_ratio"] > 1.0:
        raise Failure(f"training was not slower at {rows[-1]['cap_w']:g} W than at {caps[0]:g} W", figures)
    return figures
