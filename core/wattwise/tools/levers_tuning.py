"""Lever 2, `tuning_vs_sweep` (Zeus, NSDI'23): just-in-time power-limit tuning against the sweep's caps.

The same training with a wattwise `Run` in mode "tune" at eta 0.5 and eta 1.0, repeated: the limit each
run chose, its energy and time against the default limit, and the Zeus cost of that limit against the
best cap of the sweep.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from wattwise.power_limit import zeus_cost
from wattwise.tools.checks import markdown_table
from wattwise.tools.levers_common import (
    MIN_WINDOW_STEPS,
    TUNE_RUN_SETUP_S,
    TUNING_ETAS,
    ZEUS_CLAIM,
    Sizes,
    label,
    same_limit,
)
from wattwise.tools.levers_figures import CapRow, CapSweepFigures, ProfileEntry, TuningFigures, TuningRow
from wattwise.tools.levers_rig import Rig
from wattwise.vocabulary import Framework, RunStatus

if TYPE_CHECKING:
    from wattwise.devices.base import Device
    from wattwise.tools.checks import Context


def best_cap_w(rows: Sequence[CapRow], *, eta: float, max_power_w: float) -> float:
    """The sweep's cap of least Zeus cost per step at `eta` (the offline optimum among the caps swept)."""
    return min(rows, key=lambda r: zeus_cost(r["step_energy_j"], r["step_time_s"], eta=eta, max_power_w=max_power_w))[
        "cap_w"
    ]


def sweep_at(rows: Sequence[CapRow], limit_w: float) -> tuple[float, float]:
    """(time, energy) per step the sweep measured at `limit_w`, linear between its caps (clamped at its ends)."""
    ordered = sorted(rows, key=lambda r: r["cap_w"])
    if limit_w <= ordered[0]["cap_w"]:
        return ordered[0]["step_time_s"], ordered[0]["step_energy_j"]
    for lo, hi in itertools.pairwise(ordered):
        if limit_w <= hi["cap_w"]:
            share = (limit_w - lo["cap_w"]) / (hi["cap_w"] - lo["cap_w"])
            return (
                lo["step_time_s"] + share * (hi["step_time_s"] - lo["step_time_s"]),
                lo["step_energy_j"] + share * (hi["step_energy_j"] - lo["step_energy_j"]),
            )
    return ordered[-1]["step_time_s"], ordered[-1]["step_energy_j"]


def tuning_row(
    eta: float,
    repeat: int,
    chosen_w: float | None,
    profile: Sequence[ProfileEntry],
    sweep_rows: Sequence[CapRow],
    *,
    default_w: float,
    max_power_w: float,
) -> TuningRow:
    """One tuning run against the default limit (its own profile) and against the sweep's best cap at `eta`.

    `profile`: the run's own profile entries (`power_limit_w`, `time_s`, `energy_j` per step).
    `cost_vs_best`: the Zeus cost per step of the chosen limit over that of the sweep's best cap, both as
    the sweep measured them (1.0: tuning found the offline optimum).
    """
    best = best_cap_w(sweep_rows, eta=eta, max_power_w=max_power_w)
    row: TuningRow = {"eta": eta, "repeat": repeat, "chosen_w": chosen_w, "sweep_best_w": best}
    if chosen_w is None:
        return row
    top = next((p for p in profile if same_limit(p["power_limit_w"], default_w)), None)
    at = next((p for p in profile if same_limit(p["power_limit_w"], chosen_w)), None)
    if at is not None and top is not None:
        row["time_ratio_vs_default"] = at["time_s"] / top["time_s"]
        row["energy_ratio_vs_default"] = at["energy_j"] / top["energy_j"]
    t_chosen, e_chosen = sweep_at(sweep_rows, chosen_w)
    t_best, e_best = sweep_at(sweep_rows, best)
    chosen_cost = zeus_cost(e_chosen, t_chosen, eta=eta, max_power_w=max_power_w)
    row["cost_vs_best"] = chosen_cost / zeus_cost(e_best, t_best, eta=eta, max_power_w=max_power_w)
    row["energy_vs_best"] = e_chosen / e_best
    row["time_vs_best"] = t_chosen / t_best
    return row


def tuning_table(figures: TuningFigures) -> list[str]:
    """Markdown: each tuning run's choice against the default limit and the sweep's best cap."""

    def pct(value: float | None) -> str:
        return f"{value:.1%}" if value is not None else "n/a"

    lines = [
        f"{ZEUS_CLAIM}. Here ({label(figures)} on {figures['gpu']}): each run's own profile gives its time and "
        "energy against the default limit; the sweep's figures give the cost of its choice against the sweep's "
        "best cap for the same eta (100%: the offline optimum).",
        "",
    ]
    header = ["eta", "run", "chosen (W)", "sweep's best (W)", "time vs default", "energy vs default", "cost vs best"]
    cells = [
        [
            f"{row['eta']:g}",
            f"{row['repeat'] + 1}",
            f"{row['chosen_w']:.0f}" if row.get("chosen_w") is not None else "none",
            f"{row['sweep_best_w']:.0f}",
            pct(row.get("time_ratio_vs_default")),
            pct(row.get("energy_ratio_vs_default")),
            pct(row.get("cost_vs_best")),
        ]
        for row in figures["runs"]
    ]
    lines += markdown_table(header, cells, left=0)
    lines.append("")
    for eta, held in figures["holds"].items():
        lines.append(f"- eta {eta}: {held}")
    return lines


def choice_holds(runs: Sequence[TuningRow]) -> dict[str, str]:
    """Per eta, one line saying whether the repeats chose the same limit, and whether it is the sweep's best."""
    out: dict[str, str] = {}
    for eta in sorted({r["eta"] for r in runs}):
        chosen = [r["chosen_w"] for r in runs if r["eta"] == eta]
        best = next(r["sweep_best_w"] for r in runs if r["eta"] == eta)
        same = all(same_limit(c, chosen[0]) for c in chosen)
        text = ", ".join("none" if c is None else f"{c:.0f} W" for c in chosen)
        verdict = "the choice held" if same else "the choice did not hold"
        at_best = sum(same_limit(c, best) for c in chosen)
        out[f"{eta:g}"] = f"{verdict} ({text}); {at_best} of {len(chosen)} at the sweep's best cap ({best:.0f} W)"
    return out


def estimate_tuning_s(gpu: Device, sizes: Sizes) -> float:
    """About how long the tuning runs take: each profiles the sweep's caps, some of them again."""
    # A run profiles each of the sweep's caps over a window (power_limit.min_profile_s: 20 counter
    # updates), after 3 warm-up steps; on a coarse counter it measures again, in each of up to
    # CONFIRM_ROUNDS rounds, the best limit and (typically) one whose tie with it is open.
    again = 2 * sizes.confirm_rounds if gpu.energy_update_period_s > 0 else 0
    profile_window = sizes.profile_window_s(gpu)
    return len(sizes.tuning_runs()) * (TUNE_RUN_SETUP_S + (sizes.caps + again) * (profile_window + 0.5))


def _tune_once(rig: Rig, out: Path, eta: float, step_w: float, sizes: Sizes) -> dict[str, Any]:
    """One Trainer run whose power limit a wattwise `Run` tunes at `eta`; its summary's power-limit part."""
    from wattwise.config import load_config
    from wattwise.run import Run
    from wattwise.tools.levers_training import TuneCallback

    gpu = rig.gpu
    cfg = load_config(
        overrides=[
            f"devices.backend={gpu.backend}",
            f"output_dir={out}",
            "power_limit.mode=tune",
            f"power_limit.eta={eta}",
            "power_limit.reuse=false",
            "power_limit.wait_steps=2",
            "power_limit.warmup_steps=3",
            f"power_limit.profile_steps={MIN_WINDOW_STEPS}",
            f"power_limit.step_w={step_w}",
            f"power_limit.confirm_rounds={sizes.confirm_rounds}",
            f"monitor.sync_cuda={str(rig.cuda_index is not None).lower()}",
        ]
    )
    run = Run(cfg, framework=Framework.TRANSFORMERS, devices=[gpu], sync=rig.sync)
    try:
        rig.trainer(out, [TuneCallback(run, sizes.steps_after_tuning, rig.clock())]).train()
    except BaseException as exc:
        run.abort(exc)  # the limit is restored now
        run.finish(RunStatus.FAILED)
        raise
    limit: dict[str, Any] = (run.summary or {}).get("power_limit") or {}
    return limit


def check_tuning_vs_sweep(ctx: Context) -> TuningFigures:
    """Lever 2: just-in-time tuning at each eta, repeated, against the default limit and the sweep's best cap.

    Raises:
        Skip: no GPU, torch or transformers, or no sweep to compare with (cap_sweep did not pass).
        Failure: no tuning run chose a limit.
    """
    from wattwise.tools.checks import Failure, Skip

    sweep = cast("CapSweepFigures | None", ctx.shared.get("cap_sweep"))
    rig = Rig.of(ctx)
    if not sweep:
        raise Skip("needs the figures of cap_sweep, which did not pass in this folder; run cap_sweep first")
    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    rng = gpu.power_limit_range()
    caps = [r["cap_w"] for r in sweep["rows"]]
    # The tuner profiles from the maximum down in steps of step_w: the sweep's spacing, so that both measure
    # the same limits when the default limit is the maximum.
    step_w = (max(caps) - min(caps)) / (len(caps) - 1) if len(caps) > 1 else 25.0
    runs: list[TuningRow] = []
    for eta, repeat in sizes.tuning_runs():
        limit = _tune_once(rig, ctx.out / "levers" / f"tune_eta{eta:g}_{repeat + 1}", eta, step_w, sizes)
        profile = [cast(ProfileEntry, dict(p)) for p in limit.get("profile") or []]
        row = tuning_row(
            eta,
            repeat,
            limit.get("chosen_power_limit_w"),
            profile,
            sweep["rows"],
            default_w=sweep["default_w"],
            max_power_w=rng.max_w,
        )
        row["profile"], row["tuning"] = profile, limit.get("tuning")
        runs.append(row)
    figures: TuningFigures = {
        "gpu": gpu.name,
        "simulated": gpu.simulated,
        "etas": list(TUNING_ETAS),
        "step_w": step_w,
        "runs": runs,
        "holds": choice_holds(runs),
        "claim": ZEUS_CLAIM,
    }
    if all(r["chosen_w"] is None for r in runs):
        raise Failure("no tuning run chose a power limit (see each run's tuning reason)", figures)
    return figures
