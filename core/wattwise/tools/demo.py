"""`wattwise demo`: the emulated workload trained on the simulated GPU with power-limit tuning.

The framework loops live in the adapters (`lightning_energy.demo`, `accelerate_energy.demo`), registered
as entry points of the group `wattwise.demo`, so `core` never imports a framework. Each returns the same
JSON-ready result: the measured profile, the chosen limit, the run's energy and the energy of the same
steps at the maximum limit (measured by a second run, not estimated).

With `backend="agent"` the demo changes the limits through a node agent serving the simulated backend
(`wattwise agent serve --backend simulated`, its socket at `$WATTWISE_AGENT_SOCKET`): the agent holds the
GPU for the demo's process and the demo drives the emulated load on the simulated GPU whose state it
shares with the agent. Still a simulated GPU, and labelled so.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise import safe_files
from wattwise.config import SETTINGS, EnergyConfig, default_of, load_config
from wattwise.devices import Physics, PowerModel
from wattwise.errors import ConfigError, Key, Unavailable, UsageError
from wattwise.extras import missing_extra
from wattwise.power_limit import profile_limits_w, profile_table, zeus_cost
from wattwise.profile import Payback, ProfileEntry
from wattwise.record.summary import (
    PowerLimitSummary,
    payback_lines,
    percent,
    saving_resolved,
    with_uncertainty,
)
from wattwise.vocabulary import Selector

if TYPE_CHECKING:
    from wattwise.run import Run

#: Keys each of the demo's two runs sets itself (tuned, then the baseline): not for `overrides`.
PER_RUN_KEYS: tuple[str, ...] = ("power_limit.mode", "output_dir")
#: The demo's own settings, after `devices.backend` (its `backend`) and before its options and `overrides`.
DEMO_BASE: tuple[str, ...] = ("power_limit.reuse=false", "monitor.sync_cuda=false")
#: Keys the demo fixes whatever `overrides` says: it always trains on the simulated GPU.
FIXED_KEYS: tuple[str, ...] = ("devices.backend", *PER_RUN_KEYS)
#: The demo's backends: the simulated GPU itself, or a node agent's simulated GPU.
DEMO_BACKENDS: tuple[str, ...] = ("simulated", "agent")
_SETTING_HELP = {s.key: s.help for s in SETTINGS}


def _option(key: str, default: Any = MISSING, help: str | None = None, **cli: str) -> Any:
    """A demo option that sets the config key `key`; its default and help are the config's unless given.

    `cli`: how the command line shows it (`flag`, `metavar`) when not `--<field>`.
    """
    text = help if help is not None else _SETTING_HELP[key]
    meta = {"key": key, "help": text, **cli}
    return field(default=default_of(key) if default is MISSING else default, metadata=meta)


@dataclass
class DemoOptions:
    """The options of `wattwise demo`; those with a `key` in their metadata set that config key.

    Errors name these fields; the CLI renames them to its flags (`--<field>`, or the metadata's `flag`).
    """

    framework: str = field(default="lightning", metadata={"help": "lightning or accelerate"})
    backend: str = field(
        default="simulated",
        metadata={
            "help": "simulated, or agent: the simulated GPU of a node agent (`wattwise agent serve --backend "
            "simulated`) at $WATTWISE_AGENT_SOCKET, which holds it for the demo"
        },
    )
    power_model: str | None = _option(
        "devices.simulated.power_model",
        metavar="FILE.csv",
        help="CSV power_limit,time,power (W, relative step time, average W); default: built-in",
    )
    selector: str = _option("power_limit.selector")
    eta: float = _option("power_limit.eta")
    max_slowdown: float = _option("power_limit.max_slowdown")
    #: Steps trained after the tuning has finished.
    steps_after_tuning: int = field(default=200, metadata={"help": "steps trained after the tuning"})
    wait_steps: int = _option("power_limit.wait_steps", help="steps left untouched at the start")
    warmup_steps: int = _option("power_limit.warmup_steps", help="steps run at each limit before measuring")
    profile_steps: int = _option("power_limit.profile_steps", help="steps measured at each limit")
    step_w: float = _option("power_limit.step_w", help="distance between profiled limits (W)")
    base_step_time_s: float = _option(
        "devices.simulated.base_step_time_s",
        0.05,
        flag="--base-step-time",
        help="seconds of one emulated step at the maximum limit",
    )
    output_dir: str = _option("output_dir", "wattwise_runs/demo")
    #: Where simulated GPUs keep their settings; None: the demo's own folder under the state dir, removed at exit.
    state_dir: str | None = _option(
        "devices.simulated.state_dir",
        help="where the simulated GPU keeps its settings; default: a folder of the "
        "demo's own under the state dir, removed when the demo ends",
    )
    #: Any other key, as dotlist items (`power_limit.cap_w=200`).
    overrides: list[str] = field(
        default_factory=list,
        metadata={
            "flag": "--set",
            "metavar": "KEY=VALUE",
            "help": "any other key of configs/energy.yaml, applied last, e.g. monitor.sample_interval_s=0.05 "
            "(repeatable; the options above have their own flags)",
        },
    )

    def validate(self) -> None:
        """Check every option; the energy settings are checked by the configuration, as a run checks them."""
        backend, power_model, overrides = Key("backend"), Key("power_model"), Key("overrides")
        if self.backend not in DEMO_BACKENDS:
            raise UsageError(backend, f" must be one of {', '.join(DEMO_BACKENDS)} (got {self.backend!r})")
        if self.backend == "agent" and self.power_model is not None:
            raise UsageError(
                power_model,
                ": the agent's simulated GPU follows the agent's power model; leave ",
                power_model,
                " out with ",
                backend,
                " agent",
            )
        PowerModel.of(self.power_model)  # read here, so a bad file is one line before any framework loads
        if self.steps_after_tuning < 1:
            raise UsageError(Key("steps_after_tuning"), f" must be at least 1 (got {self.steps_after_tuning})")
        for name in ("output_dir", "state_dir"):
            folder = getattr(self, name)
            if folder is not None and os.path.lexists(folder) and not os.path.isdir(folder):
                raise UsageError(Key(name), f" {folder} is a file, not a folder; choose another path")
        own = {f.metadata["key"]: f.name for f in fields(self) if "key" in f.metadata}
        for item in self.overrides:
            key = item.split("=", 1)[0].strip()
            if key in own:
                raise UsageError(overrides, f": {key} is the demo's option ", Key(own[key]), "; set it there")
            if key in FIXED_KEYS:
                raise UsageError(
                    overrides,
                    f": the demo sets {key} itself (it tunes on the simulated GPU, then "
                    "measures the same steps at the maximum limit)",
                )
        try:
            self.energy_config()
        except ConfigError as err:
            raise err.renamed(own) from None

    def energy_config(self) -> EnergyConfig:
        """The configuration of the demo's tuned run (the baseline differs in mode and output folder)."""
        return load_config(
            overrides=[*demo_overrides(self, self.state_dir), "power_limit.mode=tune", f"output_dir={self.output_dir}"]
        )

    def total_steps(self, num_limits: int) -> int:
        """Steps the tuned run lasts: waiting, warm-up and profiling of `num_limits` limits, then the steps after.

        On the realistic simulated GPU each window lasts 20 updates of its energy counter and its ends wait
        for the counter to change (`wattwise.run.power`): at most one period more each.
        """
        from wattwise.run.power import MIN_PROFILE_UPDATES

        profile_steps = self.profile_steps
        period_s = Physics.named().energy_update_period_s
        if period_s > 0:
            window = math.ceil(MIN_PROFILE_UPDATES * period_s / self.base_step_time_s) + 1
            profile_steps = max(profile_steps, window) + 2 * math.ceil(period_s / self.base_step_time_s)
        per_limit = self.warmup_steps + profile_steps
        return self.wait_steps + num_limits * per_limit + self.steps_after_tuning


def demo_overrides(options: DemoOptions, state_dir: str | None) -> list[str]:
    """The energy configuration of the demo as dotlist overrides, the same for every framework.

    The demo's own settings, then its options (`state_dir` for the simulated GPU's), then `overrides`;
    the framework adds `power_limit.mode` and `output_dir` for each of its two runs.
    """
    out = [f"devices.backend={options.backend}", *DEMO_BASE]
    if options.backend == "agent":
        out.append("devices.gpus=[0]")  # a one-GPU demo: the agent's first GPU (the job's, as CUDA numbers it)
    for f in fields(options):
        key = f.metadata.get("key")
        value = state_dir if f.name == "state_dir" else getattr(options, f.name)
        if key is None or key in PER_RUN_KEYS or value is None:
            continue
        if f.name == "power_model":
            value = Path(value).resolve()
        out.append(f"{key}={value}")
    return [*out, *options.overrides]


def demo_result(
    options: DemoOptions, framework: str, tuned: dict[str, Any], baseline: dict[str, Any], model: PowerModel
) -> dict[str, Any]:
    """The JSON of `wattwise demo --json` from the two runs' summaries."""
    pl_info = tuned["power_limit"] or {}
    max_w = model.limit_range_w[1]
    # Two runs measured apart: the saving is known to both runs' uncertainties in quadrature.
    tuned_u, baseline_u = tuned.get("energy_uncertainty_j") or 0.0, baseline.get("energy_uncertainty_j") or 0.0
    saved_j, saved_u = baseline["energy_j"] - tuned["energy_j"], math.hypot(tuned_u, baseline_u)
    job_max_w = max_w * len(tuned["energy_per_device_j"])
    rows = profile_table([_entry(e) for e in pl_info.get("profile", [])], eta=options.eta, max_power_w=job_max_w)
    chosen_w = pl_info.get("chosen_power_limit_w")
    # The model's own cost of each limit (the demo knows the truth the simulated GPU follows): how far the
    # choice is from the model's best, whatever the measurement's noise.
    modelled = {
        w: _modelled_cost(model, w, options.eta) for w in profile_limits_w(*model.limit_range_w, options.step_w)
    }
    best_w = min(modelled, key=lambda w: (modelled[w], -w))
    return {
        "simulated": True,
        "backend": options.backend,
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
        "energy_saved_j": saved_j,
        "run_dir": str(Path(options.output_dir)),
        "baseline_run_dir": str(Path(options.output_dir) / "baseline"),
        "energy_uncertainty_j": tuned_u,
        "baseline_energy_uncertainty_j": baseline_u,
        "energy_saved_uncertainty_j": saved_u,
        "saving_resolved": saving_resolved(saved_j, saved_u),
        "simulated_driven_by": tuned.get("simulated_driven_by"),
        # The one saving, as summary.json gives it: at the chosen limit, tuning's cost, this run.
        "payback": pl_info.get("payback"),
        # By the demo's own objective (Zeus cost, eta): each run's cost, tuning included.
        "cost_j": zeus_cost(tuned["energy_j"], tuned["time_s"], eta=options.eta, max_power_w=job_max_w),
        "baseline_cost_j": zeus_cost(baseline["energy_j"], baseline["time_s"], eta=options.eta, max_power_w=job_max_w),
        "modelled_best_power_limit_w": best_w,
        "modelled_cost_above_best": (modelled[chosen_w] / modelled[best_w] - 1.0) if chosen_w in modelled else None,
    }


def _modelled_cost(model: PowerModel, limit_w: float, eta: float) -> float:
    """The model's Zeus cost per step at `limit_w`, relative to a step at the highest limit (a ranking, not joules)."""
    time_factor, busy_w = model.at_limit(limit_w)
    return zeus_cost(busy_w * time_factor, time_factor, eta=eta, max_power_w=model.limit_range_w[1])


#: A training loop of the demo: `train(overrides, steps, stop)` trains at most `steps` steps, ending early once
#: `stop(run)` says so after a step (None: never), and returns the run's summary.
Train = Callable[[list[str], int, "Callable[[Run], bool] | None"], dict[str, Any]]


def paid_back(run: Run, steps_after_tuning: int) -> bool:
    """Whether the demo's tuned run may end: tuning ended, then the steps after it, and tuning has paid back.

    The run goes on at the chosen limit for `steps_after_tuning` steps, and longer when tuning needs more to
    pay back by the selector's objective (`wattwise.power_limit.payback`); a tuning that chose nothing, or a
    limit that never pays back, ends after `steps_after_tuning`.
    """
    power = run.power
    tuner = power.tuner
    if tuner is None or not tuner.done:
        return tuner is None and run.step_count >= steps_after_tuning  # tuning abandoned: measuring only
    gained = power.payback()
    needed = steps_after_tuning
    if gained is not None and gained.break_even_steps is not None:
        needed = max(needed, gained.break_even_steps)
    return power.steps_at_chosen >= needed


def tuned_and_baseline(options: DemoOptions, framework: str, train: Train) -> dict[str, Any]:
    """The demo of one framework.

    `train(overrides, steps, stop)` with tuning until it has paid back (`paid_back`), then the same steps at
    the maximum limit, each returning its run's summary; the comparison of the two.
    """
    model = PowerModel.of(options.power_model)
    lo, hi = model.limit_range_w
    # At most: every limit in every part, measured again twice; the tuned run ends once it has paid back.
    steps = 3 * options.total_steps(len(profile_limits_w(lo, hi, options.step_w)))
    from wattwise.tools.workload import use_one_cpu_thread  # torch: imported only when a demo runs

    logging.getLogger("wattwise.run.measurement").setLevel(logging.ERROR)  # the demo's own report says "simulated"
    use_one_cpu_thread()
    with private_state_dir() as tmp:
        common = demo_overrides(options, options.state_dir or str(tmp))
        stop = functools.partial(paid_back, steps_after_tuning=options.steps_after_tuning)
        tuned = _summary_of(options, "tuned", train, [*common, "power_limit.mode=tune"], steps, stop)
        baseline = _summary_of(options, "baseline", train, [*common, "power_limit.mode=measure"], tuned["steps"])
    return demo_result(options, framework, tuned, baseline, model)


def _summary_of(
    options: DemoOptions,
    run: str,
    train: Train,
    overrides: list[str],
    steps: int,
    stop: Callable[[Run], bool] | None = None,
) -> dict[str, Any]:
    """The summary of the demo's `run` ("tuned", or "baseline" in its own folder); one line when it has none.

    A run whose devices cannot be opened (the node agent went away between the two runs) trains
    unmeasured and leaves no summary: the demo then stops with an `Unavailable` naming the run, instead
    of the adapter's RuntimeError traceback; what the tuned run wrote stays in its folder.

    Raises:
        Unavailable: The run produced no summary.
    """
    folder = Path(options.output_dir) / ("baseline" if run == "baseline" else "")
    try:
        return train([*overrides, f"output_dir={folder}"], steps, stop)
    except RuntimeError as err:
        where = " (is the node agent at $WATTWISE_AGENT_SOCKET still running?)" if options.backend == "agent" else ""
        kept = f"; the tuned run's summary is in {options.output_dir}" if run == "baseline" else ""
        raise Unavailable(f"demo: the {run} run measured nothing: {err}{where}{kept}") from None


def demo_folder() -> Path:
    """Where demos keep their simulated GPUs' settings: `<state dir>/demo`, one folder per demo process."""
    return safe_files.state_dir() / "demo"


@contextlib.contextmanager
def private_state_dir() -> Iterator[Path]:
    """A folder of this demo's own for its simulated GPU, removed on every exit the process sees.

    It lives under `demo_folder()` beside a lock file the demo holds while it runs, so a demo killed with
    SIGKILL leaves a folder whose lock is free: the next demo restores any journalled setting in it (the
    guard's recovery), then removes it.
    """
    from wattwise.settings.locks import release_lock, take_lock
    from wattwise.settings.recovery import recover_stale_journals

    parent = demo_folder()
    parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    recover_stale_journals()
    for lock in sorted(parent.glob("*.lock")):
        if take_lock(lock):
            shutil.rmtree(lock.with_suffix(""), ignore_errors=True)
            release_lock(lock, unlink=True)
    name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    lock, folder = parent / f"{name}.lock", parent / name
    take_lock(lock)
    try:
        folder.mkdir(mode=0o700)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        release_lock(lock, unlink=True)


def _entry(e: dict[str, float]) -> ProfileEntry:
    return ProfileEntry(e["power_limit_w"], e["time_s"], e["energy_j"])


def frameworks() -> dict[str, Any]:
    """The demo runners the adapters registered (entry point group `wattwise.demo`), by framework name."""
    return {ep.name: ep for ep in entry_points(group="wattwise.demo")}


def run_demo(options: DemoOptions) -> dict[str, Any]:
    """Run the demo with the runner of `options.framework`: a tuned run, then the same steps at the maximum.

    Returns:
        The demo's result, as `wattwise demo --json` prints it.

    Raises:
        UsageError: an option is invalid, or no runner is registered for the framework.
    """
    options.validate()
    if options.backend == "agent":
        _check_agent_is_simulated()
    found = frameworks()
    if options.framework not in found:
        raise UsageError(
            f"framework must be one of {', '.join(sorted(found)) or '(none installed)'} "
            f"(got {options.framework!r}); is wattwise installed (pip install -e .)?"
        )
    _make_output_dir(options.output_dir)
    try:
        runner = found[options.framework].load()
    except ModuleNotFoundError as err:  # the adapter is installed, its framework (an extra) is not
        raise missing_extra(err, f"wattwise demo --framework {options.framework}", options.framework) from None
    result: dict[str, Any] = runner(options)
    return result


def _make_output_dir(folder: str) -> None:
    """Create the demo's output folder and check it takes a file, before any training.

    A training script whose output folder cannot be written degrades to training unmeasured; the demo
    exists to show its two runs' summaries, so it stops at once with one line instead.

    Raises:
        UsageError: the folder cannot be created or written (its parent read-only, a full disk).
    """
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".wattwise-demo-"):
            pass
    except OSError as err:
        raise UsageError(
            Key("output_dir"),
            f" {folder}: the demo cannot write there ({err.strerror or err}); choose a folder you may write",
        ) from None


def _check_agent_is_simulated() -> None:
    """The demo emulates its load on a simulated GPU: an agent serving real GPUs is refused."""
    from wattwise.devices.agent import AgentClient

    client = AgentClient()
    served = client.devices().get("backend")
    if served != "simulated":
        raise UsageError(
            f"backend agent: the agent at {client.path} serves {served} GPUs; the demo runs on a "
            "simulated GPU only (start one with `wattwise agent serve --backend simulated`)"
        )


def format_demo(result: dict[str, Any]) -> str:
    """The profile table, the choice and the saving, as a person reads them."""
    through = " through the node agent" if result.get("backend") == "agent" else ""
    lines = [
        f"wattwise demo on the SIMULATED GPU{through} (modelled power, not a measurement of real hardware)",
        f"framework: {result['framework']}   selector: {result['selector']}   eta: {result['eta']:g}",
        "",
        f"{'limit (W)':>10} {'time/step (s)':>14} {'energy/step (J)':>16} {'avg power (W)':>14} {'cost (J)':>10}",
    ]
    for row in result["profile"]:
        mark = "  <- chosen" if row["power_limit_w"] == result["chosen_power_limit_w"] else ""
        lines.append(
            f"{row['power_limit_w']:>10g} {row['time_s']:>14.4f} {row['energy_j']:>16.3f} "
            f"{row['avg_power_w']:>14.1f} {row['cost']:>10.3f}{mark}"
        )
    lines += [
        "",
        f"chosen power limit: {result['chosen_power_limit_w']:g} W",
        *_tie_line(result),
        *_payback_lines(result),
        f"energy: {with_uncertainty(result['energy_j'], result.get('energy_uncertainty_j'), 'J')} in "
        f"{result['time_s']:.2f} s ({result['steps']} steps, tuning included)",
        f"same steps at the maximum limit ({result['max_power_limit_w']:g} W): "
        f"{with_uncertainty(result['baseline_energy_j'], result.get('baseline_energy_uncertainty_j'), 'J')} in "
        f"{result['baseline_time_s']:.2f} s",
        saving_line(result),
        *_cost_lines(result),
        f"summary: {result['run_dir']}/summary.json",
    ]
    return "\n".join(lines)


def _payback_lines(result: dict[str, Any]) -> list[str]:
    """The one saving of the tuned run, as its summary gives it: at the chosen limit, tuning's cost, this run."""
    pl = result.get("payback")
    profile = tuple(ProfileEntry(r["power_limit_w"], r["time_s"], r["energy_j"]) for r in result["profile"])
    if not pl or result.get("chosen_power_limit_w") is None:
        return []
    limit = PowerLimitSummary(
        mode="tune",
        eta=result["eta"],
        chosen_power_limit_w=result["chosen_power_limit_w"],
        profile=profile,
        payback=Payback(**{k: v for k, v in pl.items() if k != "paid_back"}),
    )
    return list(payback_lines(limit) or ())


def _cost_lines(result: dict[str, Any]) -> list[str]:
    """Each run's cost by the demo's own objective, and how the choice stands by the model's own figures."""
    cost, base = result.get("cost_j"), result.get("baseline_cost_j")
    if cost is None or base is None:
        return []
    verdict = "less" if cost < base else "more"
    lines = [
        f"by the objective (eta {result['eta']:g}): {cost:,.0f} J for the tuned run, {base:,.0f} J for the same "
        f"steps at the maximum limit ({100 * abs(cost - base) / base:.1f}% {verdict}, tuning included)"
    ]
    above, best_w = result.get("modelled_cost_above_best"), result.get("modelled_best_power_limit_w")
    if above is not None and best_w is not None:
        lines.append(
            f"the simulated GPU's model: {result['chosen_power_limit_w']:g} W costs {100 * above:.1f}% more per "
            f"step than its best limit, {best_w:g} W"
            if above > 0
            else f"the simulated GPU's model: {result['chosen_power_limit_w']:g} W is its best limit"
        )
    return lines


def _tie_line(result: dict[str, Any]) -> list[str]:
    """Why the chosen row is not the least of the cost column, when it is not (the cost and energy selectors).

    Tuning takes the highest of the limits whose cost is within what the profile windows resolve of the
    least (`wattwise.power_limit.Ranking`): on a counter that changes every 0.1 s, with noisy steps, a
    lower limit's few tenths of a per cent may be noise.
    """
    rows = result["profile"]
    chosen = next((r for r in rows if r["power_limit_w"] == result["chosen_power_limit_w"]), None)
    if chosen is None or result["selector"] not in (Selector.COST, Selector.ENERGY):
        return []
    least = min(rows, key=lambda r: r["cost"])
    if least["cost"] >= chosen["cost"] or not chosen["cost"]:
        return []
    pct = 100.0 * (chosen["cost"] - least["cost"]) / chosen["cost"]
    return [
        f"({least['power_limit_w']:g} W measured {pct:.1f}% less, within what the profile windows resolve; "
        "a tie goes to the higher limit, the faster one)"
    ]


def saving_line(result: dict[str, Any]) -> str:
    """The demo's saving with its uncertainty and its time cost, or "not resolved" when within the uncertainty.

    `energy saved 14.4% ± 0.8% for +10.7% time (508 ± 29 J)`: percentages of the baseline run's energy and time.
    """
    baseline_j, saved_j = result["baseline_energy_j"], result["baseline_energy_j"] - result["energy_j"]
    saved_u = result.get("energy_saved_uncertainty_j")
    pct = 100.0 * saved_j / baseline_j if baseline_j else 0.0
    pct_u = 100.0 * saved_u / baseline_j if baseline_j and saved_u else None
    base_s = result["baseline_time_s"]
    time_pct = 100.0 * (result["time_s"] - base_s) / base_s if base_s else 0.0
    joules = with_uncertainty(saved_j, saved_u, "J")
    if saving_resolved(saved_j, saved_u) is False:
        return (
            f"measured against that run: energy saving not resolved: {percent(pct, pct_u)} is within the "
            f"measurement uncertainty ({joules}), for {time_pct:+.1f}% time"
        )
    return f"measured against that run: energy saved {percent(pct, pct_u)} for {time_pct:+.1f}% time ({joules})"
