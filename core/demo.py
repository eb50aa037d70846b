"""`wattwise demo`: the emulated workload trained on the simulated GPU with power-limit tuning.

The framework loops live in the adapters (`lightning_energy.demo`, `accelerate_energy.demo`), registered
as entry points of the group `wattwise.demo`, so `core` never imports a framework. Each returns the same
JSON-ready result: the measured profile, the chosen limit, the run's energy and the energy of the same
steps at the maximum limit (measured by a second run, not estimated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from wattwise.devices import PowerModel
from wattwise.errors import UsageError
from wattwise.power_limit import SELECTORS, ProfileEntry, check_eta
from wattwise.session import profile_table


@dataclass
class DemoOptions:
    framework: str = "lightning"
    power_model: str | None = None
    selector: str = "cost"
    eta: float = 0.5
    max_slowdown: float = 0.1
    #: Steps trained after the tuning has finished.
    steps_after_tuning: int = 200
    wait_steps: int = 2
    warmup_steps: int = 2
    profile_steps: int = 5
    step_w: float = 25.0
    base_step_time_s: float = 0.05
    output_dir: str = "wattwise_runs/demo"
    #: Where simulated GPUs keep their settings; None: a private temporary folder.
    state_dir: str | None = None

    def validate(self) -> None:
        if self.selector not in SELECTORS:
            raise UsageError(f"--selector must be one of {', '.join(SELECTORS)} (got {self.selector!r})")
        check_eta(self.eta)
        if not (self.max_slowdown >= 0 and math.isfinite(self.max_slowdown)):
            raise UsageError(f"--max-slowdown must be >= 0, e.g. 0.1 for 10% (got {self.max_slowdown})")
        for name in ("steps_after_tuning", "profile_steps"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.base_step_time_s <= 0:
            raise UsageError("--base-step-time must be > 0 seconds")

    def total_steps(self, num_limits: int) -> int:
        per_limit = self.warmup_steps + self.profile_steps
        return self.wait_steps + num_limits * per_limit + self.steps_after_tuning


def demo_overrides(options: DemoOptions, state_dir: str) -> list[str]:
    """The energy configuration of the demo as dotlist overrides, the same for every framework."""
    out = [
        "devices.backend=simulated",
        f"devices.simulated.base_step_time_s={options.base_step_time_s}",
        f"devices.simulated.state_dir={state_dir}",
        f"power_limit.selector={options.selector}",
        f"power_limit.eta={options.eta}",
        f"power_limit.max_slowdown={options.max_slowdown}",
        f"power_limit.wait_steps={options.wait_steps}",
        f"power_limit.warmup_steps={options.warmup_steps}",
        f"power_limit.profile_steps={options.profile_steps}",
        f"power_limit.step_w={options.step_w}",
        "power_limit.reuse=false",
        "monitor.sync_cuda=false",
    ]
    if options.power_model:
        out.append(f"devices.simulated.power_model={Path(options.power_model).resolve()}")
    return out


def demo_result(options: DemoOptions, framework: str, tuned: dict[str, Any], baseline: dict[str, Any],
                model: PowerModel) -> dict[str, Any]:
    """The JSON of `wattwise demo --json` from the two runs' summaries."""
    pl_info = tuned["power_limit"] or {}
    max_w = model.limit_range_w[1]
    rows = profile_table([_entry(e) for e in pl_info.get("profile", [])], eta=options.eta,
                         max_power_w=max_w * len(tuned["energy_per_device_j"]))
    return {
        "simulated": True,
        "framework": framework,
        "selector": options.selector,
        "eta": options.eta,
        "max_slowdown": options.max_slowdown,
        "chosen_power_limit_w": pl_info.get("chosen_power_limit_w"),
        "max_power_limit_w": max_w,
        "profile": rows,
        "energy_j": tuned["energy_j"],
        "time_s": tuned["time_s"],
        "steps": tuned["steps"],
        "baseline_energy_j": baseline["energy_j"],
        "baseline_time_s": baseline["time_s"],
        "energy_saved_j": baseline["energy_j"] - tuned["energy_j"],
        "run_dir": str(Path(options.output_dir)),
        "baseline_run_dir": str(Path(options.output_dir) / "baseline"),
    }


def _entry(e: dict[str, float]) -> ProfileEntry:
    return ProfileEntry(e["power_limit_w"], e["time_s"], e["energy_j"])


def frameworks() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group="wattwise.demo")}


def run_demo(options: DemoOptions) -> dict[str, Any]:
    options.validate()
    found = frameworks()
    if options.framework not in found:
        raise UsageError(f"--framework must be one of {', '.join(sorted(found)) or '(none installed)'} "
                         f"(got {options.framework!r}); is wattwise installed (pip install -e .)?")
    runner = found[options.framework].load()
    result: dict[str, Any] = runner(options)
    return result


def format_demo(result: dict[str, Any]) -> str:
    """The profile table, the choice and the saving, as a person reads them."""
    lines = [
        "wattwise demo on the SIMULATED GPU (modelled power, not a measurement of real hardware)",
        f"framework: {result['framework']}   selector: {result['selector']}   eta: {result['eta']:g}",
        "",
        f"{'limit (W)':>10} {'time/step (s)':>14} {'energy/step (J)':>16} {'avg power (W)':>14} {'cost (J)':>10}",
    ]
    for row in result["profile"]:
        mark = "  <- chosen" if row["power_limit_w"] == result["chosen_power_limit_w"] else ""
        lines.append(f"{row['power_limit_w']:>10g} {row['time_s']:>14.4f} {row['energy_j']:>16.3f} "
                     f"{row['avg_power_w']:>14.1f} {row['cost']:>10.3f}{mark}")
    saved = result["baseline_energy_j"] - result["energy_j"]
    pct = 100.0 * saved / result["baseline_energy_j"] if result["baseline_energy_j"] else 0.0
    lines += [
        "",
        f"chosen power limit: {result['chosen_power_limit_w']:g} W",
        f"energy: {result['energy_j']:.1f} J in {result['time_s']:.2f} s "
        f"({result['steps']} steps, tuning included)",
        f"same steps at the maximum limit ({result['max_power_limit_w']:g} W): "
        f"{result['baseline_energy_j']:.1f} J in {result['baseline_time_s']:.2f} s",
        f"energy saved: {saved:.1f} J ({pct:.1f}%)",
        f"summary: {result['run_dir']}/summary.json",
    ]
    return "\n".join(lines)
