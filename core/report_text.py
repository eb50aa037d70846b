"""The short plain-text report printed at the end of a run."""

from __future__ import annotations

from typing import Any

J_PER_KWH = 3.6e6


def format_summary(summary: dict[str, Any], *, output_dir: str | None = None) -> str:
    """A few lines: energy, time, power, and what the power-limit choice did."""
    tag = " (SIMULATED GPU: modelled figures, not measurements)" if summary.get("simulated") else ""
    energy_j = float(summary["energy_j"])
    lines = [
        f"wattwise{tag}: {summary.get('framework', '')} run {summary.get('status', '')}",
        f"  time {summary['time_s']:.2f} s, energy {energy_j:.1f} J ({energy_j / J_PER_KWH:.6f} kWh), "
        f"average power {summary['avg_power_w']:.1f} W over {len(summary['energy_per_device_j'])} GPU(s), "
        f"{summary['steps']} steps",
    ]
    pl = summary.get("power_limit")
    if pl and pl.get("chosen_power_limit_w") is not None:
        if pl["mode"] == "cap":
            lines.append(f"  power cap {pl['chosen_power_limit_w']:g} W")
        else:
            how = "reused from a previous run" if pl.get("reused") else f"{len(pl['profile'])} limits profiled"
            lines.append(f"  power limit {pl['chosen_power_limit_w']:g} W chosen by {pl['selector']} "
                         f"(eta {pl['eta']:g}; {how})")
            if pl.get("energy_saved_j") is not None:
                lines.append(f"  estimated saving against the maximum limit: {pl['energy_saved_j']:.1f} J")
    if output_dir:
        lines.append(f"  summary: {output_dir}/summary.json")
    return "\n".join(lines)
