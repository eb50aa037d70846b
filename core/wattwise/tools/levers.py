"""The three levers measured on one GPU against the papers they come from: `wattwise acceptance --levers`.

    python -m wattwise.acceptance --levers [--quick] [--simulated] [--only NAME ...] [--budget-s S]

1. `cap_sweep` (McDonald et al. 2022, "Great Power, Great Responsibility"): a BERT-style masked language
   model, built from a `transformers` config (random tokens, nothing downloaded), trained with the Hugging
   Face `Trainer` at four or five power caps from the GPU's minimum to its default; per cap the time and
   energy of a training step relative to the default limit, beside the paper's V100 row (150 W of 250 W:
   108.5% of the time, 87.7% of the energy). Each cap's window spans at least `MIN_COUNTER_UPDATES`
   updates of the energy counter (`Device.energy_update_period_s`).
2. `tuning_vs_sweep` (Zeus, NSDI'23): the same training with just-in-time power-limit tuning (a wattwise
   `Run` in mode "tune") at eta 0.5 and eta 1.0, repeated: the limit each run chose, its energy and time
   against the default limit, and the Zeus cost of that limit against the best cap of the sweep.
3. `pipeline_measured` (Perseus, SOSP'24): two stages of a small transformer profiled with
   `PipelineProfiler`, the frontier and the no-slowdown plan (`wattwise frontier`, `wattwise plan`), then
   each stage's instruction sequence run under the plan by the `FrequencyController` (clocks locked
   through the settings guard) and at the maximum clock: measured time and energy against the plan's
   prediction. On one GPU the stages run one after the other; the iteration is composed from the measured
   instruction times by the schedule's DAG, and its energy is the stages' measured energy plus the
   blocking power over the time a stage waits.

Every setting goes through one `SettingsGuard` per check, which restores it on every exit path (SIGTERM
and SIGINT included; after a SIGKILL the next start restores it). On the simulated GPU (`--simulated`) the
same checks run a tiny model on the CPU whose steps last the simulated GPU's modelled time, and every
figure says "simulated". `transformers` and `torch` are imported inside the checks only.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wattwise.devices.base import Device, DeviceError, NoPermissionError
from wattwise.power_limit import CONFIRM_ROUNDS, zeus_cost
from wattwise.vocabulary import RunStatus

if TYPE_CHECKING:
    from wattwise.tools.checks import Context

#: A measurement window spans at least this many updates of the energy counter, so that its quantisation
#: (up to one update's energy at each end) stays within a few per cent.
MIN_COUNTER_UPDATES = 20
#: The shortest window on a device whose counter changes at every read (the ideal simulated GPU).
MIN_WINDOW_S = 0.5
#: Steps a window holds at least, whatever the counter.
MIN_WINDOW_STEPS = 5
#: Steps trained at a new cap before its window opens, however short the settling time (the first steps
#: of a Trainer load kernels and allocate).
SETTLE_STEPS = 3
#: Periods of the energy counter a sweep window waits, at each end, for a step in which the counter changes.
ALIGN_PERIODS = 3
#: A tuning run that has not finished after this long stops (its summary says tuning did not finish).
TUNE_RUN_LIMIT_S = 120.0
#: Two power limits closer than this are the same limit (the sweep sets whole watts, the tuner need not).
SAME_LIMIT_W = 1.0


def same_limit(a_w: float | None, b_w: float | None) -> bool:
    """Whether two power limits are the same setting (within `SAME_LIMIT_W`)."""
    return a_w is not None and b_w is not None and abs(a_w - b_w) < SAME_LIMIT_W


@dataclasses.dataclass(frozen=True)
class PaperCapRow:
    """A published power-cap result: time and energy at a cap relative to the default limit."""

    source: str
    gpu: str
    model: str
    cap_w: float
    default_w: float
    time_ratio: float
    energy_ratio: float

    @property
    def cap_fraction(self) -> float:
        """The cap as a fraction of the default limit."""
        return self.cap_w / self.default_w


#: McDonald et al. 2022 (arXiv:2205.09646), Figure 1: BERT training on a V100 capped at 150 W of 250 W.
MCDONALD_V100 = PaperCapRow(
    source="McDonald et al. 2022, Figure 1",
    gpu="V100",
    model="BERT",
    cap_w=150.0,
    default_w=250.0,
    time_ratio=1.085,
    energy_ratio=0.877,
)
#: What the Zeus paper reports for just-in-time power-limit tuning, in one line.
ZEUS_CLAIM = (
    "Zeus (NSDI'23): the power limit that minimises eta * energy + (1 - eta) * max power * time, found by "
    "profiling each limit for a few steps during the training itself (just in time) instead of offline"
)
#: What the Perseus paper reports for pipeline frequency planning, in one line.
PERSEUS_CLAIM = "Perseus (SOSP'24): up to 30% less energy with no throughput loss (GPT-3, Bloom; large pipelines)"
#: The etas of `tuning_vs_sweep`: the Zeus default, and energy only.
TUNING_ETAS = (0.5, 1.0)
#: Microbatches per pipeline iteration, and its schedule.
PIPELINE_MICROBATCHES = 4
PIPELINE_SCHEDULE = "1f1b"
#: Iterations each pipeline run (the plan's, the maximum clock's) spans at least.
PIPELINE_RUN_ITERATIONS = 10


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How long each check measures: the default length, or `--quick`'s."""

    #: Power caps of the sweep, default limit and minimum included.
    caps: int
    #: Counter updates per measurement window (at least `MIN_COUNTER_UPDATES`).
    window_updates: int
    #: Seconds of training at a new cap before its window opens (the driver's controller settles).
    settle_s: float
    #: Tuning runs at the first eta of `TUNING_ETAS`, and at each other eta.
    repeats: int
    other_eta_repeats: int
    #: SM clocks the pipeline is profiled at.
    pipeline_clocks: int
    #: Steps trained at the chosen limit after tuning, before a tuning run stops.
    steps_after_tuning: int
    #: Rounds a tuning run may measure undecided limits again (`power_limit.confirm_rounds`).
    confirm_rounds: int = CONFIRM_ROUNDS

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        """The sizes of a `--quick` run, or of a run at default length."""
        if quick:
            return cls(
                caps=4,
                window_updates=20,
                settle_s=0.5,
                repeats=2,
                other_eta_repeats=1,
                pipeline_clocks=3,
                steps_after_tuning=10,
                confirm_rounds=1,
            )
        return cls(
            caps=5,
            window_updates=40,
            settle_s=1.0,
            repeats=2,
            other_eta_repeats=2,
            pipeline_clocks=4,
            steps_after_tuning=30,
        )

    def window_s(self, gpu: Device) -> float:
        """Seconds a measurement window lasts on `gpu`: `window_updates` counter updates, `MIN_WINDOW_S` at least."""
        return max(MIN_WINDOW_S, self.window_updates * gpu.energy_update_period_s)

    @staticmethod
    def profile_window_s(gpu: Device) -> float:
        """Seconds the pipeline profiler measures the shortest instruction for: `MIN_COUNTER_UPDATES` updates.

        The longer instructions' windows last proportionally longer (one repeat count for all).
        """
        return max(MIN_WINDOW_S, MIN_COUNTER_UPDATES * gpu.energy_update_period_s)

    def tuning_runs(self) -> list[tuple[float, int]]:
        """(eta, repeat) of every tuning run: `repeats` at eta 0.5; as many at the other eta, or one when quick."""
        first, *others = TUNING_ETAS
        return [(first, r) for r in range(self.repeats)] + [
            (eta, r) for eta in others for r in range(self.other_eta_repeats)
        ]


# -- estimates for --budget-s ----------------------------------------------------------------------------
#: Seconds a check spends outside its windows on a real GPU: building the model, moving it to the GPU,
#: the Trainer's start and first steps (importing torch and transformers comes once, before the first).
SETUP_S = 10.0
#: Seconds a tuning run spends outside its profile windows: the model, the Trainer, the steps after.
TUNE_RUN_SETUP_S = 7.0
#: The pipeline profiler's windows against `Sizes.profile_window_s`: its repeat count follows the shortest
#: instruction, the longer ones (a backward, the deeper stage, a lower clock) take about this much more.
PROFILE_WINDOW_SPREAD = 2.5


def estimate_s(name: str, gpu: Device | None, quick: bool) -> float:
    """About how long lever check `name` takes on `gpu` (for `--budget-s`): windows, settling, set-up."""
    if gpu is None:
        return 0.0
    sizes = Sizes.of(quick)
    window, profile_window = sizes.window_s(gpu), sizes.profile_window_s(gpu)
    if name == "cap_sweep":  # each cap, and the workload power profile the GPU offers (`sweep_profile`)
        windows = sizes.caps + (sweep_profile(gpu)[0] is not None)
        # Each window's ends wait for a change of the counter: about a period in all.
        return SETUP_S + windows * (sizes.settle_s + window + gpu.energy_update_period_s)
    if name == "tuning_vs_sweep":
        # A run profiles each of the sweep's caps over a window (power_limit.min_profile_s: 20 counter
        # updates), after 3 warm-up steps; on a coarse counter it measures again, in each of up to
        # CONFIRM_ROUNDS rounds, the best limit and (typically) one whose tie with it is open.
        again = 2 * sizes.confirm_rounds if gpu.energy_update_period_s > 0 else 0
        return len(sizes.tuning_runs()) * (TUNE_RUN_SETUP_S + (sizes.caps + again) * (profile_window + 0.5))
    if name == "pipeline_measured":
        profile = 2 * 2 * sizes.pipeline_clocks * profile_window * PROFILE_WINDOW_SPREAD
        return SETUP_S + profile + 2 * 2 * (window + 0.5)
    return 0.0


# -- the tables: pure, from a check's figures ------------------------------------------------------------
def cap_caps_w(min_w: float, default_w: float, count: int) -> list[float]:
    """`count` caps from the default limit down to the minimum, evenly spaced, in whole watts."""
    if count < 2 or default_w <= min_w:
        return [float(round(default_w))]
    step = (default_w - min_w) / (count - 1)
    return [float(round(default_w - i * step)) for i in range(count)]


@dataclasses.dataclass(frozen=True)
class CapWindow:
    """One cap's measurement window: per training step, its time (s) and energy (J) and how precise that is."""

    cap_w: float
    time_s: float
    energy_j: float
    steps: int
    energy_uncertainty_j: float = 0.0
    #: The NVML workload power profile requested during the window (None: none, a plain cap).
    profile: str | None = None


def cap_rows(windows: Sequence[CapWindow], default_w: float, *, base: CapWindow | None = None) -> list[dict[str, Any]]:
    """The sweep's rows, highest cap first, each relative to the default limit's window (which must be one).

    The energy ratio's uncertainty combines both windows' relative uncertainties in quadrature. `base`: the
    window the rows are relative to, when it is not among `windows` (a profile's row against the sweep's).
    """
    base = base or next((w for w in windows if same_limit(w.cap_w, default_w) and w.profile is None), None)
    if base is None:
        raise ValueError(f"the sweep has no row at the default limit {default_w:g} W")
    rows: list[dict[str, Any]] = []
    for w in sorted(windows, key=lambda w: -w.cap_w):
        ratio = w.energy_j / base.energy_j
        rows.append(
            {
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
                **({"profile": w.profile} if w.profile is not None else {}),
            }
        )
    return rows


def cap_table(figures: dict[str, Any]) -> list[str]:
    """Markdown: the sweep beside the paper's row, as in McDonald et al.'s Figure 1."""
    paper = figures["paper"]
    label = "simulated" if figures.get("simulated") else "measured"
    lines = [
        f"Time and energy per training step relative to the default limit ({figures['default_w']:g} W), "
        f"{label} on {figures['gpu']}; the paper's row is {paper['source']} ({paper['model']} on a "
        f"{paper['gpu']}).",
        "",
        "| | cap (W) | cap / default | time | energy | mean power (W) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in [*figures["rows"], *figures.get("profile_rows", [])]:
        spread = row.get("energy_ratio_uncertainty")
        pm = f" ± {spread * 100:.1f}" if spread else ""
        who = f"{label}, profile `{row['profile']}`" if row.get("profile") else label
        lines.append(
            f"| {who} | {row['cap_w']:g} | {row['cap_fraction']:.0%} | {row['time_ratio']:.1%} | "
            f"{row['energy_ratio']:.1%}{pm} | {row['avg_power_w']:.0f} |"
        )
    lines.append(
        f"| paper, {paper['gpu']} | {paper['cap_w']:g} | {paper['cap_w'] / paper['default_w']:.0%} | "
        f"{paper['time_ratio']:.1%} | {paper['energy_ratio']:.1%} | |"
    )
    lines += ["", f"Workload power profiles: {figures['workload_power_profiles']}"]
    return lines


def best_cap_w(rows: Sequence[dict[str, float]], *, eta: float, max_power_w: float) -> float:
    """The sweep's cap of least Zeus cost per step at `eta` (the offline optimum among the caps swept)."""
    return min(rows, key=lambda r: zeus_cost(r["step_energy_j"], r["step_time_s"], eta=eta, max_power_w=max_power_w))[
        "cap_w"
    ]


def sweep_at(rows: Sequence[dict[str, float]], limit_w: float) -> tuple[float, float]:
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
    profile: Sequence[dict[str, float]],
    sweep_rows: Sequence[dict[str, float]],
    *,
    default_w: float,
    max_power_w: float,
) -> dict[str, Any]:
    """One tuning run against the default limit (its own profile) and against the sweep's best cap at `eta`.

    `profile`: the run's own profile entries (`power_limit_w`, `time_s`, `energy_j` per step).
    `cost_vs_best`: the Zeus cost per step of the chosen limit over that of the sweep's best cap, both as
    the sweep measured them (1.0: tuning found the offline optimum).
    """
    best = best_cap_w(sweep_rows, eta=eta, max_power_w=max_power_w)
    row: dict[str, Any] = {"eta": eta, "repeat": repeat, "chosen_w": chosen_w, "sweep_best_w": best}
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


def tuning_table(figures: dict[str, Any]) -> list[str]:
    """Markdown: each tuning run's choice against the default limit and the sweep's best cap."""
    label = "simulated" if figures.get("simulated") else "measured"

    def pct(row: dict[str, Any], key: str) -> str:
        return f"{row[key]:.1%}" if row.get(key) is not None else "n/a"

    lines = [
        f"{ZEUS_CLAIM}. Here ({label} on {figures['gpu']}): each run's own profile gives its time and energy "
        "against the default limit; the sweep's figures give the cost of its choice against the sweep's "
        "best cap for the same eta (100%: the offline optimum).",
        "",
        "| eta | run | chosen (W) | sweep's best (W) | time vs default | energy vs default | cost vs best |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in figures["runs"]:
        chosen = f"{row['chosen_w']:.0f}" if row.get("chosen_w") is not None else "none"
        lines.append(
            f"| {row['eta']:g} | {row['repeat'] + 1} | {chosen} | {row['sweep_best_w']:.0f} | "
            f"{pct(row, 'time_ratio_vs_default')} | {pct(row, 'energy_ratio_vs_default')} | "
            f"{pct(row, 'cost_vs_best')} |"
        )
    lines.append("")
    for eta, held in figures["holds"].items():
        lines.append(f"- eta {eta}: {held}")
    return lines


def choice_holds(runs: Sequence[dict[str, Any]]) -> dict[str, str]:
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


def pipeline_table(figures: dict[str, Any]) -> list[str]:
    """Markdown: the plan's predicted and measured iteration, and the saving against all at the maximum clock."""
    label = "simulated" if figures.get("simulated") else "measured"
    p, m = figures["predicted"], figures["measured"]
    lines = [
        f"{PERSEUS_CLAIM}. Here: {figures['stages']} stages, {figures['microbatches']} microbatches, "
        f"{figures['schedule']}, {label} on {figures['gpu']}. {figures['composition']}",
        "",
        "| | iteration time (s) | iteration energy (J) | saving vs maximum clock | slowdown |",
        "|---|---:|---:|---:|---:|",
        f"| planned, predicted | {p['plan_time_s']:.4g} | {p['plan_energy_j']:.4g} | {p['saving']:.1%} | "
        f"{p['slowdown']:.1%} |",
        f"| planned, {label} | {m['plan_time_s']:.4g} | {m['plan_energy_j']:.4g} | {m['saving']:.1%} | "
        f"{m['slowdown']:.1%} |",
        f"| maximum clock, predicted | {p['max_time_s']:.4g} | {p['max_energy_j']:.4g} | | |",
        f"| maximum clock, {label} | {m['max_time_s']:.4g} | {m['max_energy_j']:.4g} | | |",
    ]
    return lines


#: The Markdown section of each lever check, by name (`acceptance.md`).
TABLES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "cap_sweep": cap_table,
    "tuning_vs_sweep": tuning_table,
    "pipeline_measured": pipeline_table,
}


def section(name: str, figures: dict[str, Any]) -> list[str]:
    """The lines `acceptance.md` shows for check `name` before its figures (none for a check not a lever's)."""
    table = TABLES.get(name)
    return table(figures) if table is not None and figures else []


# -- the rig: one model and its training on the device under test ----------------------------------------
@dataclasses.dataclass(frozen=True)
class ModelSize:
    """The masked language model trained by the Trainer checks, and the pipeline's stages."""

    vocab: int
    width: int
    layers: int
    heads: int
    seq: int
    batch: int
    #: Seconds one emulated step lasts at the maximum limit (the simulated GPU only).
    emulated_step_s: float
    #: Pipeline: width, layers of each stage, tokens per microbatch (sequences, length).
    stage_width: int
    stage_layers: tuple[int, int]
    stage_batch: int
    stage_seq: int
    #: Seconds of each stage's forward (backward: twice) at the maximum clock (the simulated GPU only).
    emulated_forward_s: tuple[float, float]

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"BERT-style masked LM ({self.layers} layers, width {self.width}, vocab {self.vocab}), "
            f"{self.batch} x {self.seq} random tokens per step"
        )


#: BERT-base on a real GPU (bf16): a step keeps a data-centre GPU busy, so the cap matters to it.
REAL_MODEL = ModelSize(
    vocab=30522,
    width=768,
    layers=12,
    heads=12,
    seq=128,
    batch=128,
    emulated_step_s=0.0,
    stage_width=2048,
    stage_layers=(4, 6),
    stage_batch=8,
    stage_seq=1024,
    emulated_forward_s=(0.0, 0.0),
)
#: A tiny model on the CPU whose steps last the simulated GPU's modelled time.
SIMULATED_MODEL = ModelSize(
    vocab=512,
    width=32,
    layers=2,
    heads=2,
    seq=16,
    batch=4,
    emulated_step_s=0.05,
    stage_width=32,
    stage_layers=(1, 1),
    stage_batch=2,
    stage_seq=16,
    emulated_forward_s=(0.06, 0.09),
)


@dataclasses.dataclass
class Rig:
    """The GPU under test, where its work runs (CUDA, or the CPU for the simulated GPU) and how to wait for it."""

    gpu: Device
    model: ModelSize
    cuda_index: int | None

    @classmethod
    def of(cls, ctx: Context, *, trainer: bool = True) -> Rig:
        """The rig for the context's GPU; `trainer`: the check trains with the Hugging Face Trainer.

        Raises:
            Skip: no GPU, no torch (or transformers, for the Trainer), no CUDA for a real GPU, or
                ACCELERATE_ENERGY set (for the Trainer).
        """
        from wattwise.tools.checks import Skip

        gpu = ctx.require_gpu()
        if gpu.simulation is None:
            ctx.require_load()  # torch sees the GPU's CUDA device, or the reason why not
        try:
            import torch  # noqa: F401

            if trainer:
                import transformers  # noqa: F401
        except ImportError as err:
            raise Skip(f"{err.name} is not installed (pip install {err.name})") from None
        if trainer and os.environ.get("ACCELERATE_ENERGY", "") not in ("", "0"):
            raise Skip("ACCELERATE_ENERGY is set: its callback would tune every Trainer; unset it for these checks")
        if gpu.simulation is not None:
            return cls(gpu, SIMULATED_MODEL, None)
        return cls(gpu, REAL_MODEL, int(getattr(gpu, "cuda_index", gpu.index)))

    def sync(self) -> None:
        """Wait for the work queued on the GPU (nothing to wait for on the simulated one)."""
        if self.cuda_index is not None:
            import torch

            torch.cuda.synchronize(self.cuda_index)

    def trainer(self, out: Path, callbacks: list[Any], seed: int = 0) -> Any:
        """A Hugging Face `Trainer` of the masked LM on random tokens, stopped by its callbacks."""
        import torch
        from transformers import BertConfig, BertForMaskedLM, PrinterCallback, Trainer, TrainingArguments

        from wattwise.tools.workload import emulate_step

        m, gpu = self.model, self.gpu
        if self.cuda_index is not None and torch.cuda.device_count() > 1:
            from wattwise.tools.checks import Skip

            raise Skip(
                f"the Trainer would train on all {torch.cuda.device_count()} visible GPUs; run with "
                "CUDA_VISIBLE_DEVICES=N (and --gpu 0) to measure GPU N alone"
            )
        torch.manual_seed(seed)
        config = BertConfig(
            vocab_size=m.vocab,
            hidden_size=m.width,
            num_hidden_layers=m.layers,
            num_attention_heads=m.heads,
            intermediate_size=4 * m.width,
            max_position_embeddings=max(512, m.seq),
        )
        args = TrainingArguments(
            output_dir=str(out / "trainer"),
            max_steps=1_000_000,  # the callbacks stop it
            per_device_train_batch_size=m.batch,
            learning_rate=1e-4,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            use_cpu=self.cuda_index is None,
            bf16=self.cuda_index is not None,
            dataloader_num_workers=0,
            seed=seed,
        )
        emulated_s = m.emulated_step_s

        class EmulatedTrainer(Trainer):
            """On the simulated GPU a step lasts its modelled time; on a real GPU it just runs."""

            def training_step(self, *a: Any, **k: Any) -> Any:
                work = super().training_step
                return emulate_step([gpu], lambda: work(*a, **k), base_time_s=emulated_s or None)

        trainer = EmulatedTrainer(
            model=BertForMaskedLM(config),
            args=args,
            train_dataset=MaskedTokens(m.vocab, m.seq, 64 * m.batch, seed),
            callbacks=callbacks,
        )
        trainer.remove_callback(PrinterCallback)  # the Trainer's own end-of-training line, not the report's
        return trainer


class MaskedTokens:
    """Random token sequences with 15% of positions masked (id 103) and labelled: what an MLM trains on."""

    def __init__(self, vocab: int, seq: int, count: int, seed: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(seed)
        self.labels_source = torch.randint(1000 if vocab > 2000 else 5, vocab, (count, seq), generator=gen)
        masked = torch.rand(count, seq, generator=gen) < 0.15
        self.inputs = self.labels_source.masked_fill(masked, min(103, vocab - 1))
        self.labels = self.labels_source.masked_fill(~masked, -100)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.inputs[i], "labels": self.labels[i]}


def trainer_callback_base() -> type:
    """`transformers.TrainerCallback`, imported only when a check runs."""
    from transformers import TrainerCallback

    return TrainerCallback


# -- check 1: the power-cap sweep ------------------------------------------------------------------------
def _sweep_callback(
    rig: Rig,
    guard: Any,
    caps_w: list[float],
    sizes: Sizes,
    results: list[CapWindow],
    profile: str | None = None,
    refused: list[str] | None = None,
) -> Any:
    """A Trainer callback that trains at each cap in turn: settle, then one measurement window, then the next.

    With `profile`, a last window at the first cap (the default limit) with that NVML workload power profile
    requested; a refused request ends the sweep there, its words in `refused`.
    """
    from wattwise.monitor import EnergyMonitor, counter_window_uncertainty_j

    gpu = rig.gpu
    window_s = sizes.window_s(gpu)
    monitor = EnergyMonitor([gpu], sync=rig.sync)
    clock = gpu.simulation.clock if gpu.simulation is not None else time.monotonic
    period_s = gpu.energy_update_period_s

    items: list[tuple[float, str | None]] = [(cap, None) for cap in caps_w]
    if profile is not None:
        items.append((caps_w[0], profile))

    class Sweep(trainer_callback_base()):  # type: ignore[misc]
        """Apply, settle, then a window that opens and ends on steps in which the energy counter changed.

        Aligned so, each end of a window is within one training step of a change of a coarse counter
        rather than anywhere within its period (`counter_window_uncertainty_j`). A counter that does not
        change within `ALIGN_PERIODS` periods is not waited for: that window is not aligned, and says so
        by the monitor's wider uncertainty.
        """

        def __init__(self) -> None:
            self.index = 0
            self.phase = "apply"
            self.since = 0.0
            self.steps = 0
            self.edge_j: float | None = None
            self.waiting_since = 0.0
            self.aligned = True

        def counter_changed(self) -> bool:
            """Whether the counter changed since the last look (True, and no more waiting, when it cannot say)."""
            if period_s <= 0:
                return True
            try:
                value = gpu.energy_j()
            except DeviceError:
                self.aligned = False
                return True
            changed = self.edge_j is not None and value != self.edge_j
            self.edge_j = value
            if not changed and clock() - self.waiting_since > ALIGN_PERIODS * period_s:
                self.aligned = False
                return True
            return changed

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.phase == "apply":
                cap, wanted = items[self.index]
                guard.set_power_limit(gpu, cap)
                if wanted is not None:
                    try:
                        guard.request_workload_power_profiles(gpu, [wanted])
                    except DeviceError as err:  # the caps are measured: the sweep ends without this row
                        if refused is not None:
                            refused.append(str(err))
                        control.should_training_stop = True
                        self.phase = "done"
                        return
                self.phase, self.since, self.steps = "settle", clock(), 0

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.steps += 1
            elapsed = clock() - self.since
            if self.phase == "settle" and elapsed >= sizes.settle_s and self.steps >= SETTLE_STEPS:
                self.phase, self.edge_j, self.waiting_since, self.aligned = "align", None, clock(), True
                self.counter_changed()  # the counter's value now, to see the step in which it changes
            elif self.phase == "align" and self.counter_changed():
                monitor.begin_window("cap")
                self.phase, self.since, self.steps = "measure", clock(), 0
            elif self.phase == "measure" and elapsed >= window_s and self.steps >= MIN_WINDOW_STEPS:
                self.phase, self.edge_j, self.waiting_since = "closing", None, clock()
                self.counter_changed()
            elif self.phase == "closing" and self.counter_changed():
                window = monitor.end_window("cap")
                steps = self.steps
                cap, wanted = items[self.index]
                uncertainty_j = (
                    counter_window_uncertainty_j(window.total_energy_j, window.time_s, period_s, aligned_steps=steps)
                    if self.aligned
                    else window.total_energy_uncertainty_j
                )
                results.append(
                    CapWindow(
                        cap,
                        window.time_s / steps,
                        window.total_energy_j / steps,
                        steps,
                        uncertainty_j / steps,
                        wanted,
                    )
                )
                self.index += 1
                self.phase = "apply"
                if self.index == len(items):
                    control.should_training_stop = True

        def close(self) -> None:
            """Close the measurement windows (on every exit path of the sweep)."""
            monitor.close()

    return Sweep()


def check_cap_sweep(ctx: Context) -> dict[str, Any]:
    """Lever 1: train at caps from the default limit down to the minimum; time and energy relative to default.

    Raises:
        Skip: no GPU, torch or transformers, or the driver refused the power limit (its words).
        Failure: the energy counter did not advance, or the lowest cap did not slow the training.
    """
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import Failure, Skip

    rig = Rig.of(ctx)
    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    rng = gpu.power_limit_range()
    caps = cap_caps_w(rng.min_w, rng.default_w, sizes.caps)
    results: list[CapWindow] = []
    profile, profile_note = sweep_profile(gpu)
    refused: list[str] = []
    with SettingsGuard() as guard:
        guard.install_signal_handlers()
        sweep = _sweep_callback(rig, guard, caps, sizes, results, profile, refused)
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
    figures: dict[str, Any] = {
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


#: NVML workload power profiles the sweep measures as one more baseline, the first the GPU offers.
SWEEP_PROFILES = ("training", "llm_training", "max_q")


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


# -- check 2: just-in-time tuning against the sweep -------------------------------------------------------
def _tune_once(rig: Rig, out: Path, eta: float, step_w: float, sizes: Sizes) -> dict[str, Any]:
    """One Trainer run whose power limit a wattwise `Run` tunes at `eta`; its summary's power-limit part."""
    from wattwise.config import load_config
    from wattwise.run import Run

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
    run = Run(cfg, framework="transformers", devices=[gpu], sync=rig.sync)
    after = sizes.steps_after_tuning
    clock = gpu.simulation.clock if gpu.simulation is not None else time.monotonic
    start = clock()

    class Tune(trainer_callback_base()):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.start()

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.step_begin()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.step_end()
            power = run.power
            # Tuning ended (its limit then trained `after` steps), or was abandoned (no tuner any more).
            done = power.tuner is None or (power.tuner.done and power.steps_at_chosen >= after)
            if done or not run.measuring or clock() - start > TUNE_RUN_LIMIT_S:
                control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            run.finish()

    try:
        rig.trainer(out, [Tune()]).train()
    except BaseException as exc:
        run.abort(exc)  # the limit is restored now
        run.finish(RunStatus.FAILED)
        raise
    limit = (run.summary or {}).get("power_limit") or {}
    return limit


def check_tuning_vs_sweep(ctx: Context) -> dict[str, Any]:
    """Lever 2: just-in-time tuning at each eta, repeated, against the default limit and the sweep's best cap.

    Raises:
        Skip: no GPU, torch or transformers, or no sweep to compare with (cap_sweep did not pass).
        Failure: no tuning run chose a limit.
    """
    from wattwise.tools.checks import Failure, Skip

    sweep = ctx.shared.get("cap_sweep")
    rig = Rig.of(ctx)
    if not sweep:
        raise Skip("needs the figures of cap_sweep, which did not pass in this folder; run cap_sweep first")
    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    rng = gpu.power_limit_range()
    caps = [r["cap_w"] for r in sweep["rows"]]
    # The tuner profiles from the maximum down in steps of step_w: the sweep's spacing, so that both measure
    # the same limits when the default limit is the maximum.
    step_w = (max(caps) - min(caps)) / (len(caps) - 1) if len(caps) > 1 else 25.0
    runs = []
    for eta, repeat in sizes.tuning_runs():
        limit = _tune_once(rig, ctx.out / "levers" / f"tune_eta{eta:g}_{repeat + 1}", eta, step_w, sizes)
        profile = [dict(p) for p in limit.get("profile") or []]
        runs.append(
            {
                **tuning_row(
                    eta,
                    repeat,
                    limit.get("chosen_power_limit_w"),
                    profile,
                    sweep["rows"],
                    default_w=sweep["default_w"],
                    max_power_w=rng.max_w,
                ),
                "profile": profile,
                "tuning": limit.get("tuning"),
            }
        )
    figures = {
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


# -- check 3: the pipeline plan, measured ----------------------------------------------------------------
def pipeline_clocks_mhz(supported: Sequence[int], count: int) -> list[int]:
    """`count` supported SM clocks from the highest down to about half of it, evenly spread, highest first."""
    ordered = sorted(set(supported), reverse=True)
    top = ordered[0]
    usable = [f for f in ordered if f >= top / 2] or ordered
    if len(usable) <= count:
        return usable
    picks = {usable[round(i * (len(usable) - 1) / (count - 1))] for i in range(count)}
    return sorted(picks, reverse=True)


@dataclasses.dataclass
class _Stage:
    """One pipeline stage on the GPU under test: its forward and backward of one microbatch.

    `backward(mb, keep=True)` keeps the microbatch's graph, so that the profiler can repeat a backward
    without a forward inside its window.
    """

    forward: Callable[[int], None]
    backward: Callable[[int, bool], None]
    outputs: dict[int, Any]


def _stages(rig: Rig) -> list[_Stage]:
    """The two stages: transformer layers on CUDA (bf16), or a tiny copy on the CPU that drives the simulated GPU.

    Each forward keeps its output per microbatch until that microbatch's backward, as a pipeline stage does;
    the first stage's backward takes a gradient of its output's shape (what the next stage would send).
    """
    import torch

    from wattwise.tools.workload import emulate_step

    m, gpu = rig.model, rig.gpu
    device = torch.device("cuda", rig.cuda_index) if rig.cuda_index is not None else torch.device("cpu")
    dtype = torch.bfloat16 if rig.cuda_index is not None else torch.float32
    torch.manual_seed(0)
    stages = []
    for index, layers in enumerate(m.stage_layers):
        heads = max(1, m.stage_width // 128)
        body = torch.nn.Sequential(
            *[
                torch.nn.TransformerEncoderLayer(m.stage_width, heads, 4 * m.stage_width, batch_first=True)
                for _ in range(layers)
            ]
        ).to(device, dtype)
        x = torch.randn(m.stage_batch, m.stage_seq, m.stage_width, device=device, dtype=dtype)
        grad = torch.randn_like(x)
        outputs: dict[int, Any] = {}
        last = index == len(m.stage_layers) - 1
        forward_s = m.emulated_forward_s[index] or None
        backward_s = 2 * m.emulated_forward_s[index] or None

        def forward(mb: int, body: Any = body, x: Any = x, outputs: dict[int, Any] = outputs) -> None:
            outputs[mb] = body(x.detach().requires_grad_(True))

        def backward(
            mb: int, keep: bool, outputs: dict[int, Any] = outputs, grad: Any = grad, last: bool = last
        ) -> None:
            out = outputs[mb] if keep else outputs.pop(mb)
            if last:
                out.float().pow(2).mean().backward(retain_graph=keep)
            else:
                out.backward(grad, retain_graph=keep)

        def run_forward(mb: int, forward: Callable[[int], None] = forward, base_s: float | None = forward_s) -> None:
            emulate_step([gpu], lambda: forward(mb), base_time_s=base_s)

        def run_backward(
            mb: int, keep: bool, backward: Callable[[int, bool], None] = backward, base_s: float | None = backward_s
        ) -> None:
            emulate_step([gpu], lambda: backward(mb, keep), base_time_s=base_s)

        stages.append(_Stage(run_forward, run_backward, outputs))
    return stages


def _profile_stage_work(rig: Rig, stage: _Stage) -> Any:
    """The stage as `PipelineProfiler` runs it: one microbatch's forward, or its backward (graph kept).

    The profiler's warm-up backward makes the forward it needs, outside the measured window.
    """
    from wattwise.frequency.profiler import StageWork

    def forward() -> None:
        stage.forward(0)

    def backward() -> None:
        if 0 not in stage.outputs:
            stage.forward(0)
        stage.backward(0, True)

    return StageWork(rig.gpu, forward, backward)


def compose_iteration(
    instruction_s: dict[tuple[int, str, int], float],
    stage_energy_j: Sequence[float],
    *,
    schedule: str,
    stages: int,
    microbatches: int,
    p_blocking_w: float,
) -> tuple[float, float]:
    """(iteration time, iteration energy) composed from stages run one after the other on one GPU.

    The time is the longest path of the schedule's DAG over the measured instruction times; the energy is
    what the stages burned in their instructions plus the blocking power over the time a stage waits,
    exactly as the planner counts it (`wattwise.pipeline.problem.iteration_energy_j`).
    """
    import numpy as np

    from wattwise.pipeline.dag import pipeline_dag
    from wattwise.pipeline.problem import iteration_energy_j

    dag = pipeline_dag(schedule, stages, microbatches)
    durations = np.zeros(dag.num_nodes)
    for (stage, instruction, mb), seconds in instruction_s.items():
        durations[dag.node(stage, instruction, mb)] = seconds  # type: ignore[arg-type]
    time_s = float(dag.makespan(durations))
    busy_s = float(durations.sum())
    return time_s, float(iteration_energy_j(float(sum(stage_energy_j)), busy_s, time_s, stages, p_blocking_w))


def _run_plan(
    rig: Rig,
    guard: Any,
    stages: list[_Stage],
    plan: list[list[Any]],
    window_s: float,
    clock_change_s: Sequence[float] = (),
    timer: Callable[[float, Callable[[], None]], None] | None = None,
) -> tuple[dict[tuple[int, str, int], float], list[float], list[list[tuple[str, int, int]]]]:
    """Run each stage's instruction sequence under its plan (the controller locks the clocks), for a window.

    The controller changes each stage's clock off the training thread, `clock_change_s[stage]` ahead of
    a faster segment (the plan's latencies, from the profile), as `follow_plan` does in training; on the
    simulated GPU's virtual clock, through its `timer` (`VirtualClock.call_later`) at the same moments.

    Returns each instruction's mean time, each stage's mean energy per iteration, and what each controller
    applied in its first iteration.
    """
    from wattwise.frequency.controller import FrequencyController, stage_plan
    from wattwise.monitor import EnergyMonitor

    gpu = rig.gpu
    clock = gpu.simulation.clock if gpu.simulation is not None else time.perf_counter
    times: dict[tuple[int, str, int], list[float]] = {}
    energies: list[float] = []
    applied: list[list[tuple[str, int, int]]] = []
    for index, stage in enumerate(stages):
        steps = stage_plan(plan[index])
        latency_s = clock_change_s[index] if index < len(clock_change_s) else 0.0
        # On a real GPU the clock calls run off the training thread; the simulated one's virtual time
        # passes only on the thread that runs its work, so they run there.
        controller = FrequencyController(
            steps,
            gpu,
            guard,
            strict=True,
            clock_change_s=latency_s,
            background=gpu.simulation is None,
            timer=timer,
        )
        monitor = EnergyMonitor([gpu], sync=rig.sync)
        try:
            _stage_iteration(rig, stage, controller, steps, clock, {})  # warm-up, clocks settle
            monitor.begin_window("stage")
            iterations, start = 0, clock()
            while iterations < 2 or clock() - start < window_s:
                _stage_iteration(rig, stage, controller, steps, clock, times, index)
                iterations += 1
            window = monitor.end_window("stage")
        finally:
            controller.stop()
            monitor.close()
        energies.append(window.total_energy_j / iterations)
        applied.append(controller.applied[: len(steps)])
    return {k: sum(v) / len(v) for k, v in times.items()}, energies, applied


def _stage_iteration(
    rig: Rig,
    stage: _Stage,
    controller: Any,
    steps: Sequence[Any],
    clock: Callable[[], float],
    times: dict[tuple[int, str, int], list[float]],
    index: int = 0,
) -> None:
    for step in steps:
        controller.before(step.instruction, step.microbatch)
        start = clock()
        if step.instruction == "forward":
            stage.forward(step.microbatch)
        else:
            stage.backward(step.microbatch, False)
        rig.sync()
        times.setdefault((index, step.instruction, step.microbatch), []).append(clock() - start)


class VirtualClock:
    """Simulated seconds: what `sleep` waits is added at once; the simulated GPU's pipeline check runs on it.

    The check measures instructions of 20-60 ms; on a wall clock, a CPU shared with other work stretches
    the tiny model's real work beyond its modelled time and the figures follow the machine's load, not
    the plan. On this clock each instruction lasts exactly what the simulated GPU's physics says.
    """

    def __init__(self) -> None:
        self.now_s = 0.0
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._count = 0

    def __call__(self) -> float:
        """The simulated seconds passed."""
        return self.now_s

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass, running each timer that falls due on the way at its moment."""
        until = self.now_s + max(0.0, seconds)
        while self._timers and self._timers[0][0] <= until:
            at_s, _, run = heapq.heappop(self._timers)
            self.now_s = max(self.now_s, at_s)
            run()  # may sleep itself (a clock call takes its time), as a call on another thread would
        self.now_s = max(self.now_s, until)

    def call_later(self, seconds: float, run: Callable[[], None]) -> None:
        """Run `run` when `seconds` more have passed (during a later `sleep`)."""
        self._count += 1
        heapq.heappush(self._timers, (self.now_s + max(0.0, seconds), self._count, run))


def _idle_power_w(rig: Rig) -> float:
    """The GPU's power while it waits (the blocking power of the frontier), read after a second idle."""
    rig.sync()
    sleep = rig.gpu.simulation.sleep if rig.gpu.simulation is not None else time.sleep
    sleep(1.0)
    return round(rig.gpu.power_w(), 1)


def check_pipeline_measured(ctx: Context) -> dict[str, Any]:
    """Lever 3: profile two stages, plan the no-slowdown point, run it under the controller; measured vs predicted.

    Raises:
        Skip: no GPU or torch, fewer than two known SM clocks, or the driver refused to lock them.
        Failure: `wattwise frontier` or `plan` failed, or the controller did not follow the plan.
    """
    from wattwise.cli.main import main as wattwise_main
    from wattwise.frequency.profiler import PipelineProfiler
    from wattwise.pipeline.profiles import write_profile
    from wattwise.settings.guard import SettingsGuard
    from wattwise.tools.checks import Failure, Skip

    rig = Rig.of(ctx, trainer=False)
    timer = None
    if rig.gpu.simulation is not None:  # the simulated GPU's time, not the CPU's (`VirtualClock`)
        virtual = VirtualClock()
        rig = dataclasses.replace(rig, gpu=rig.gpu.simulation.on_clock(virtual, virtual.sleep))
        timer = virtual.call_later
    gpu, sizes = rig.gpu, Sizes.of(ctx.quick)
    try:
        clocks = pipeline_clocks_mhz(gpu.supported_sm_clocks_mhz(), sizes.pipeline_clocks)
    except DeviceError as err:
        raise Skip(f"supported SM clocks unknown; the driver said: {err}") from None
    if len(clocks) < 2:
        raise Skip(f"fewer than two supported SM clocks ({clocks})")
    folder = ctx.out / "levers" / "pipeline"
    folder.mkdir(parents=True, exist_ok=True)
    stages = _stages(rig)
    window_s, profile_window_s = sizes.window_s(gpu), sizes.profile_window_s(gpu)
    microbatches = PIPELINE_MICROBATCHES
    with SettingsGuard() as guard:
        guard.install_signal_handlers()
        try:
            instruction_s = _instruction_time_s(rig, stages)
            profile = PipelineProfiler(
                [_profile_stage_work(rig, s) for s in stages],
                guard,
                frequencies_mhz=clocks,
                iterations=max(3, math.ceil(profile_window_s / instruction_s)),
                warmup=1,
                sync=rig.sync,
            ).measure()
        except NoPermissionError as err:
            raise Skip(f"locking SM clocks was refused; the driver said: {err}") from None
        profile_csv = folder / "profile.csv"
        write_profile(profile, profile_csv)
        p_blocking_w = _idle_power_w(rig)
        frontier, plan_path = folder / "frontier.json", folder / "plan.json"
        unit_s = max(1e-5, float(f"{instruction_s / 50:.1g}"))
        code = wattwise_main(
            [
                "frontier",
                str(profile_csv),
                "--microbatches",
                str(microbatches),
                "--schedule",
                PIPELINE_SCHEDULE,
                "--unit-time",
                str(unit_s),
                "--p-blocking",
                str(p_blocking_w),
                "--out",
                str(frontier),
                "--quiet",
            ]
        )
        if code:
            raise Failure(f"wattwise frontier exited {code} on the measured profile")
        if wattwise_main(["plan", str(frontier), "--out", str(plan_path)]):
            raise Failure("wattwise plan failed on the frontier")
        plan = json.loads(plan_path.read_text())
        # Each run spans at least PIPELINE_RUN_ITERATIONS iterations, so that the instructions' noise
        # averages out of the composed iteration (a fine counter's windows alone hold only a few).
        run_s = max(window_s, PIPELINE_RUN_ITERATIONS * float(plan["max_frequency_time_s"]))
        top = max(clocks)
        at_max = [[[ins, mb, top] for ins, mb, _ in stage] for stage in plan["plan"]]
        measured = {}
        for label, steps in (("plan", plan["plan"]), ("max", at_max)):
            times, energies, applied = _run_plan(
                rig, guard, stages, steps, run_s, plan.get("clock_change_s", []) if label == "plan" else (), timer
            )
            if label == "plan" and [[list(a) for a in stage] for stage in applied] != [
                [list(s) for s in stage] for stage in steps
            ]:
                raise Failure("the frequency controller did not apply the plan's clocks in the plan's order")
            measured[label] = compose_iteration(
                times,
                energies,
                schedule=PIPELINE_SCHEDULE,
                stages=len(stages),
                microbatches=microbatches,
                p_blocking_w=p_blocking_w,
            )
    (plan_t, plan_e), (max_t, max_e) = measured["plan"], measured["max"]
    plot = _plot_measured(folder, profile_csv, frontier, p_blocking_w, microbatches, measured)
    return {
        "gpu": gpu.name,
        "simulated": gpu.simulated,
        "stages": len(stages),
        "microbatches": microbatches,
        "schedule": PIPELINE_SCHEDULE,
        "clocks_mhz": clocks,
        "p_blocking_w": p_blocking_w,
        "unit_time_s": unit_s,
        "window_s": window_s,
        "run_s": run_s,
        "profile_csv": str(profile_csv),
        "frontier": str(frontier),
        "plan": str(plan_path),
        "composition": (
            "On one GPU the two stages ran one after the other; the iteration is composed from the measured "
            f"instruction times by the {PIPELINE_SCHEDULE} schedule's DAG (its longest path), and its energy is "
            "the stages' measured energy plus the blocking power over the time a stage waits."
        ),
        "predicted": {
            "plan_time_s": plan["time_s"],
            "plan_energy_j": plan["energy_j"],
            "max_time_s": plan["max_frequency_time_s"],
            "max_energy_j": plan["max_frequency_energy_j"],
            "saving": plan["saving"],
            "slowdown": plan["slowdown"],
        },
        "measured": {
            "plan_time_s": plan_t,
            "plan_energy_j": plan_e,
            "max_time_s": max_t,
            "max_energy_j": max_e,
            "saving": 1.0 - plan_e / max_e if max_e > 0 else None,
            "slowdown": plan_t / max_t - 1.0 if max_t > 0 else None,
        },
        "claim": PERSEUS_CLAIM,
        "plot": plot,
    }


def _plot_measured(
    folder: Path,
    profile_csv: Path,
    frontier_json: Path,
    p_blocking_w: float,
    microbatches: int,
    measured: dict[str, tuple[float, float]],
) -> str | None:
    """`frontier.png`: the frontier with the planned points and the measured ones; None without matplotlib."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:  # the figures stand without the picture
        return None
    from wattwise.pipeline.dag import pipeline_dag
    from wattwise.pipeline.files import read_frontier_json
    from wattwise.pipeline.plot import plot_frontier
    from wattwise.pipeline.problem import PlanningProblem
    from wattwise.pipeline.profiles import load_profile

    profile = load_profile(profile_csv)
    problem = PlanningProblem.build(
        profile, pipeline_dag(PIPELINE_SCHEDULE, profile.num_stages, microbatches), p_blocking_w
    )
    path = folder / "frontier.png"
    points = [("no-slowdown plan, measured", *measured["plan"]), ("maximum clock, measured", *measured["max"])]
    plot_frontier(problem, read_frontier_json(frontier_json), path, measured=points)
    return str(path)


def _instruction_time_s(rig: Rig, stages: list[_Stage]) -> float:
    """The shortest instruction's time at the default clock (one forward and backward per stage, after one warm-up)."""
    shortest = math.inf
    clock = rig.gpu.simulation.clock if rig.gpu.simulation is not None else time.perf_counter
    for stage in stages:
        for _ in range(2):
            rig.sync()
            start = clock()
            stage.forward(0)
            rig.sync()
            middle = clock()
            stage.backward(0, False)
            rig.sync()
            end = clock()
        shortest = min(shortest, middle - start, end - middle)
    return max(shortest, 1e-4)


#: The lever checks, in the order they run (each may use the figures of those before it).
LEVER_CHECKS: list[tuple[str, Callable[[Context], dict[str, Any]]]] = [
    ("cap_sweep", check_cap_sweep),
    ("tuning_vs_sweep", check_tuning_vs_sweep),
    ("pipeline_measured", check_pipeline_measured),
]
