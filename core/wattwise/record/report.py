"""The energy report of a run: device and facility energy, emissions, cost, settings and savings.

`build_report` turns a run directory (as `wattwise.record.files.read_run_dir` reads it) and the facility
inputs (PUE, carbon intensity, price) into a `RunReport`, written as JSON (everything), CSV (one row of
scalars, so the reports of many runs concatenate into one table) and an energy statement in Markdown,
ready to paste into a paper as McDonald et al. recommend: energy used, where, when, PUE, emissions, and
the steps taken to reduce it.

Method. Facility energy, emissions and cost integrate the run's power timeline (`power.csv`, linear
between samples) against the PUE, intensity and price step series over [start_time, end_time]. The
timeline is sampled and the energy counter is exact, so the timeline is scaled so that the devices'
energy equals the summary's `energy_j`; the scale factor is reported. Without `power.csv` (or with no
power inside the run) the energy is spread uniformly over the run and the report says so. CPU and DRAM
energy, when measured, has no timeline and is always spread uniformly. A PUE that is not supplied is
taken as 1.0 and labelled as such, so facility energy and emissions are then lower bounds.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, TypedDict, cast

import numpy as np

from wattwise import bounds, readable
from wattwise.bounds import Bound
from wattwise.carbon.integrate import (
    J_PER_KWH,
    CombinedEnergy,
    EnergyProfile,
    TimelineEnergy,
    UniformEnergy,
    facility_totals,
)
from wattwise.carbon.series import (
    INTENSITY,
    PRICE,
    PUE,
    Constant,
    Series,
    check_covers,
    check_series_values,
    format_utc,
)
from wattwise.codec import FIX
from wattwise.errors import UsageError
from wattwise.record.files import RunDir
from wattwise.record.summary import (
    PowerLimitSummary,
    SettingValue,
    never_applied,
    never_applied_why,
    payback_lines,
    simulated_label,
    with_uncertainty,
)
from wattwise.safe_files import (
    UntrustedFile,
    check_writable_target,
    json_text,
    output_dir,
    read_trusted_json,
    replace_file,
    write_text,
)
from wattwise.vocabulary import RunMode, RunStatus, Selector

REPORT_SCHEMA = "wattwise.report/1"
REPORT_JSON = "report.json"
REPORT_CSV = "report.csv"
STATEMENT_MD = "energy_statement.md"

PUE_NOT_SUPPLIED = "not supplied (1.0 assumed: facility energy and emissions are lower bounds)"
NOT_SUPPLIED = "not supplied"


@dataclass(frozen=True)
class FacilityInputs:
    """What the run directory does not know: the facility's PUE, the grid, the price, where it ran."""

    pue: Series | None = None
    intensity: Series | None = None
    price: Series | None = None
    currency: str | None = None
    region: str | None = None
    hardware: str | None = None


class EpochFigures(TypedDict):
    """One epoch in report.json: its number, time (s) and energy (J), how precisely that is known."""

    epoch: int
    time_s: float
    energy_j: float
    energy_uncertainty_j: float | None


class SettingFigures(TypedDict):
    """One setting applied during the run, in report.json: when (unix seconds and UTC), where, what, to what."""

    timestamp_s: float
    device: str
    setting: str
    value: SettingValue
    time: str


#: A scalar of report.csv's one row.
CsvCell = str | int | float | None


@dataclass(frozen=True)
class RunReport:
    """Every figure of the report; `energy_statement` renders these and only these."""

    simulated: bool
    status: str | None
    wattwise_version: str | None
    backend: str | None
    framework: str | None
    hostname: str | None
    region: str | None
    hardware: str | None
    devices: list[str]
    start_time: str
    end_time: str
    time_s: float
    steps: int | None
    device_energy_j: float
    device_energy_kwh: float
    cpu_energy_j: float | None
    it_energy_j: float
    it_energy_kwh: float
    facility_energy_j: float
    facility_energy_kwh: float
    pue_effective: float
    pue_source: str
    intensity_effective_g_per_kwh: float | None
    intensity_source: str
    emissions_kg_co2e: float | None
    cost: float | None
    currency: str | None
    price_source: str
    energy_method: str
    timeline_samples: int
    timeline_scale: float | None
    power_limit_w: float | None
    power_limit_mode: str | None
    power_limit_selector: str | None
    power_limit_eta: float | None
    power_limits_profiled: int
    batch_size: int | None
    frequency_plan: str | None
    baseline_energy_j: float | None
    energy_saved_j: float | None
    energy_saved_kwh: float | None
    energy_saved_fraction: float | None
    facility_energy_saved_kwh: float | None
    emissions_saved_kg_co2e: float | None
    epochs: list[EpochFigures] = field(default_factory=list)
    settings_timeline: list[SettingFigures] = field(default_factory=list)
    schema: str = REPORT_SCHEMA
    #: What tuning did when it set no limit that training ran at (chose none, or never applied its
    #: choice); None otherwise. The statement says this instead of "the GPU power limit was set to".
    power_limit_note: str | None = None
    #: How precisely the devices' energy is known (J; None: the run's summary does not say). Facility energy
    #: and emissions are known to the same fraction.
    device_energy_uncertainty_j: float | None = None
    #: How precisely the estimated saving is known (J), and whether it is resolved (larger than that);
    #: None: unknown.
    energy_saved_uncertainty_j: float | None = None
    saving_resolved: bool | None = None
    #: What drove a simulated GPU ("steps", "emulated", "nothing"; `summary.json`'s `simulated_driven_by`).
    simulated_driven_by: str | None = None
    #: The limit was reused from an earlier run of the job (not profiled in this one), and that run's id
    #: (None when the summary does not say).
    power_limit_reused: bool = False
    power_limit_reused_from: str | None = None
    #: A carbon-aware run: the intensity it followed (a table code's figure names its source and year) and
    #: the threshold at and above which it ran at the energy-optimal limit; None when it was not carbon-aware.
    carbon_aware_intensity_source: str | None = None
    carbon_aware_threshold_g_per_kwh: float | None = None
    #: What in the run's summary is possible but odd (`check_summary`), one line each; the report stands.
    odd: list[str] = field(default_factory=list)
    #: A tuned run's saving as every page gives it (`wattwise.record.summary.payback_lines`): at the chosen
    #: limit, tuning's cost, this run with its break-even; empty when its summary has no payback.
    payback: list[str] = field(default_factory=list)
    #: This run's energy saved against its steps at the highest limit, tuning included (J;
    #: `power_limit.payback.run_energy_saved_j`); None without a payback.
    run_energy_saved_j: float | None = None
    #: Why tuning did not finish (`power_limit.tuning.reason`), when it did not: no saving is claimed.
    tuning_unfinished: str | None = None


#: The report's figures that are the run summary's own, under the same names (`RunSummary`'s fields).
_SUMMARY_FIELDS = (
    "simulated",
    "status",
    "wattwise_version",
    "backend",
    "framework",
    "hostname",
    "time_s",
    "steps",
    "cpu_energy_j",
    "simulated_driven_by",
)


def build_report(run: RunDir, inputs: FacilityInputs) -> RunReport:
    """The report of `run` under `inputs`; every supplied series must cover the run."""
    s = run.summary
    pue = inputs.pue or Constant(1.0, PUE_NOT_SUPPLIED)
    for quantity, series in ((PUE, pue), (INTENSITY, inputs.intensity), (PRICE, inputs.price)):
        if series is not None:
            check_series_values(series, quantity)
            check_covers(series, s.start_s, s.end_s, quantity, "the run")
    _check_energies(run)
    odd = check_summary(run)

    device_energy, method, samples, scale = _device_energy(run)
    parts: list[EnergyProfile] = [device_energy]
    if s.cpu_energy_j:
        parts.append(UniformEnergy(s.cpu_energy_j, s.start_s, s.end_s))
    totals = facility_totals(
        CombinedEnergy(tuple(parts)),
        s.start_s,
        s.end_s,
        pue=pue,
        intensity=inputs.intensity,
        price=inputs.price,
    )
    # Integrated over the run, IT energy equals energy_j + cpu_energy_j (by the scale); use the exact sum.
    it_energy_j = s.energy_j + (s.cpu_energy_j or 0.0)
    pue_effective = totals.pue_effective if totals.it_energy_j > 0 else pue.value_at(s.start_s)
    facility_j = it_energy_j * pue_effective
    intensity = totals.intensity_effective_g_per_kwh
    emissions_kg = None if totals.emissions_g is None else totals.emissions_g / 1000.0

    limit = s.power_limit
    unfinished = limit is not None and limit.tuning is not None and not limit.tuning.finished
    saved_j = limit.energy_saved_j if limit and not unfinished else None  # an older summary's 0 J: none
    paid = payback_lines(limit) if limit is not None and not unfinished and not never_applied(limit) else None
    baseline_j = limit.baseline_energy_j if limit else None
    facility_saved_kwh = None if saved_j is None else saved_j * pue_effective / J_PER_KWH
    devices = sorted(set(s.energy_per_device_j) | {t.device for t in run.traces or ()})
    return RunReport(
        **{name: getattr(s, name) for name in _SUMMARY_FIELDS},
        region=inputs.region,
        hardware=inputs.hardware or _hardware(s.device_names),
        devices=devices,
        start_time=format_utc(s.start_s),
        end_time=format_utc(s.end_s),
        device_energy_j=s.energy_j,
        device_energy_kwh=s.energy_j / J_PER_KWH,
        it_energy_j=it_energy_j,
        it_energy_kwh=it_energy_j / J_PER_KWH,
        facility_energy_j=facility_j,
        facility_energy_kwh=facility_j / J_PER_KWH,
        pue_effective=pue_effective,
        pue_source=pue.source,
        intensity_effective_g_per_kwh=intensity,
        intensity_source=inputs.intensity.source if inputs.intensity else NOT_SUPPLIED,
        emissions_kg_co2e=emissions_kg,
        cost=totals.cost,
        currency=inputs.currency,
        price_source=inputs.price.source if inputs.price else NOT_SUPPLIED,
        energy_method=method,
        timeline_samples=samples,
        timeline_scale=scale,
        power_limit_w=s.settings.power_limit_w or (limit.chosen_power_limit_w if limit else None),
        power_limit_mode=limit.mode if limit else None,
        power_limit_selector=limit.selector if limit else None,
        power_limit_eta=limit.eta if limit else None,
        power_limits_profiled=len(limit.profile) if limit else 0,
        batch_size=s.settings.batch_size,
        frequency_plan=s.settings.frequency_plan,
        baseline_energy_j=baseline_j,
        energy_saved_j=saved_j,
        energy_saved_kwh=None if saved_j is None else saved_j / J_PER_KWH,
        energy_saved_fraction=saved_j / baseline_j if saved_j is not None and baseline_j else None,
        facility_energy_saved_kwh=facility_saved_kwh,
        emissions_saved_kg_co2e=(
            None if facility_saved_kwh is None or intensity is None else facility_saved_kwh * intensity / 1000.0
        ),
        epochs=[cast(EpochFigures, asdict(e)) for e in s.epochs],
        settings_timeline=[
            cast(SettingFigures, {**asdict(e), "time": format_utc(e.timestamp_s)}) for e in s.settings_timeline
        ],
        power_limit_note=_tuning_note(limit, s.status),
        device_energy_uncertainty_j=s.energy_uncertainty_j,
        energy_saved_uncertainty_j=limit.energy_saved_uncertainty_j if limit else None,
        saving_resolved=limit.saving_resolved if limit else None,
        power_limit_reused=bool(limit and limit.mode != RunMode.CAP and limit.reused),
        power_limit_reused_from=limit.reused_run_id if limit and limit.reused else None,
        carbon_aware_intensity_source=(
            (s.carbon_aware.intensity_source or NOT_SUPPLIED) if s.carbon_aware is not None else None
        ),
        carbon_aware_threshold_g_per_kwh=s.carbon_aware.threshold_g_per_kwh if s.carbon_aware is not None else None,
        odd=odd,
        payback=list(paid or ()),
        run_energy_saved_j=limit.payback.run_energy_saved_j if paid and limit and limit.payback else None,
        tuning_unfinished=(
            (limit.tuning.reason or "no reason recorded") if unfinished and limit and limit.tuning else None
        ),
    )


def _tuning_note(limit: PowerLimitSummary | None, status: str | None) -> str | None:
    """What tuning did when training ran at no limit it chose: it chose none, or never applied its choice."""
    if limit is None or limit.mode == RunMode.CAP or limit.tuning is None:
        return None
    if limit.chosen_power_limit_w is None and not limit.tuning.finished:
        return f"power-limit tuning chose no limit ({limit.tuning.reason or 'no reason recorded'})"
    if never_applied(limit):
        why = never_applied_why(status)
        return f"power-limit tuning chose {limit.chosen_power_limit_w:g} W but never applied it ({why})"
    return None


def _check_energies(run: RunDir) -> None:
    """Refuse a summary whose figures cannot all hold: a report of negative or over-100% energy is wrong."""
    s = run.summary
    where = f"{run.path / 'summary.json'}"
    for name, value in (("energy_j", s.energy_j), ("cpu_energy_j", s.cpu_energy_j)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{where}: {name} must be a finite number >= 0 (got {value!r})")
    limit = s.power_limit
    if limit is None or limit.energy_saved_j is None or limit.baseline_energy_j is None:
        return
    if not (math.isfinite(limit.energy_saved_j) and limit.energy_saved_j <= limit.baseline_energy_j):
        raise UsageError(
            f"{where}: power_limit.energy_saved_j {limit.energy_saved_j:g} J exceeds "
            f"power_limit.baseline_energy_j {limit.baseline_energy_j:g} J (the energy used would be "
            "negative); the summary is inconsistent"
        )


#: The longest text a summary's names may hold (a host, a device model, a job).
_MAX_NAME = 256
#: An average power per device above this is odd (no accelerator draws more), though not impossible to record.
_ODD_POWER_PER_DEVICE_W = 2000.0


def check_summary(run: RunDir) -> list[str]:
    """Refuse what no run's summary can hold, and say what is merely odd, before a report believes it.

    `summary.json` is read by its codec (`wattwise.codec`: types, finite numbers); this adds what a
    report needs of the figures: the bounds of `wattwise.bounds` every other reader applies (a run's time,
    a power limit, a time since the epoch), eta within 0..1, a closed word for the limit's mode, and names
    that are printable text (no terminal escapes or line breaks reach a report or a statement).

    Returns:
        One line for each odd thing (a time that disagrees with start and end, a power no GPU draws, a
        setting applied outside the run), for the report to carry and the command to print.

    Raises:
        UsageError: the first impossible field, naming it, its range, the value and the fix.
    """
    s = run.summary
    where = f"{run.path / 'summary.json'}"

    def refuse(name: str, expected: str, got: object) -> None:
        shown = repr(got) if len(repr(got)) <= 40 else repr(got)[:37] + "..."
        raise UsageError(f"{where}: {name} must be {expected} (got {shown}); {FIX}")

    def within(name: str, value: object, bound: Bound) -> None:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            number = float(value)  # type: ignore[arg-type]
            low = -bound.high if bound.low is None else bound.low
            ok = (number > low if bound.above_low else number >= low) and number <= bound.high
        if not ok:
            refuse(name, bound.describe(), value)

    within("time_s", s.time_s, bounds.TIME_S)
    within("start_time", s.start_s, bounds.TIMESTAMP_S)
    within("end_time", s.end_s, bounds.TIMESTAMP_S)
    for name, text in (("hostname", s.hostname), ("job", s.job), ("framework", s.framework), ("backend", s.backend)):
        if text is not None and not (isinstance(text, str) and len(text) <= _MAX_NAME and text.isprintable()):
            refuse(name, f"printable text of at most {_MAX_NAME} characters", text)
    for key in s.energy_per_device_j:
        if not (isinstance(key, str) and len(key) <= _MAX_NAME and key.isprintable()):
            refuse("energy_per_device_j", f"keyed by device names, printable text of at most {_MAX_NAME}", key)
    for i, device in enumerate(s.devices):
        model = device.get("name")
        if model is not None and not (isinstance(model, str) and len(model) <= _MAX_NAME and model.isprintable()):
            refuse(
                f"devices[{i}].name", f"a device's model name, printable text of at most {_MAX_NAME} characters", model
            )
    limit = s.power_limit
    if limit is not None:
        if str(limit.mode) not in {str(m) for m in RunMode} - {str(RunMode.MEASURE)}:
            refuse("power_limit.mode", "cap or tune", limit.mode)
        if limit.chosen_power_limit_w is not None:
            within("power_limit.chosen_power_limit_w", limit.chosen_power_limit_w, bounds.POWER_LIMIT_W)
        if limit.eta is not None and not (isinstance(limit.eta, int | float) and 0.0 <= limit.eta <= 1.0):
            refuse("power_limit.eta", "from 0 to 1", limit.eta)
        for i, entry in enumerate(limit.profile):
            within(f"power_limit.profile[{i}].power_limit_w", entry.power_limit_w, bounds.POWER_LIMIT_W)
            within(f"power_limit.profile[{i}].time_s", entry.time_s, bounds.TIME_S)
            within(f"power_limit.profile[{i}].energy_j", entry.energy_j, bounds.ENERGY_J)
    for i, event in enumerate(s.settings_timeline):
        within(f"settings_timeline[{i}].timestamp", event.timestamp_s, bounds.TIMESTAMP_S)
        for name, text in (("device", event.device), ("setting", event.setting)):
            if not (isinstance(text, str) and len(text) <= _MAX_NAME and text.isprintable()):
                refuse(f"settings_timeline[{i}].{name}", "printable text", text)
        if event.setting.endswith("_w") and isinstance(event.value, int | float) and not isinstance(event.value, bool):
            within(f"settings_timeline[{i}].value", event.value, bounds.POWER_LIMIT_W)
    escape = _control_text(asdict(s), "")
    if escape is not None:
        refuse(escape[0], "text without terminal control characters", escape[1])
    return _odd(run)


#: Control characters no summary's text holds (a tab and a line break may; an escape sequence may not).
_CONTROL = frozenset(chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)))


def _control_text(value: object, where: str) -> tuple[str, str] | None:
    """The first text (its field, its value) in a summary's fields that holds a control character."""
    if isinstance(value, str):
        return (where or "summary", value) if any(c in _CONTROL for c in value) else None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = ((f"[{i}]", item) for i, item in enumerate(value))
    else:
        return None
    for key, item in items:
        if isinstance(key, str) and any(c in _CONTROL for c in key):
            return (where or "summary", key)
        path = f"{where}{key}" if str(key).startswith("[") else f"{where}.{key}" if where else str(key)
        found = _control_text(item, path)
        if found is not None:
            return found
    return None


def _odd(run: RunDir) -> list[str]:
    """What a summary holds that no rule forbids but a reader should know (`check_summary`)."""
    s = run.summary
    odd = []
    span_s = s.end_s - s.start_s
    if abs(span_s - s.time_s) > max(60.0, 0.01 * s.time_s):
        odd.append(f"time_s {s.time_s:g} s differs from end_time - start_time ({span_s:g} s)")
    devices = max(1, len(s.energy_per_device_j), len(s.devices))
    per_device_w = s.energy_j / s.time_s / devices
    if per_device_w > _ODD_POWER_PER_DEVICE_W:
        odd.append(f"the average power, {per_device_w:,.0f} W per device, is more than any GPU draws")
    outside = [e for e in s.settings_timeline if not s.start_s - 60.0 <= e.timestamp_s <= s.end_s + 60.0]
    if outside:
        odd.append(f"{len(outside)} setting(s) of settings_timeline fall outside the run's start and end")
    if s.energy_j == 0 and s.time_s > 60.0:
        odd.append("energy_j is 0 for a run of more than a minute: nothing was measured")
    return odd


def _hardware(names: tuple[str, ...]) -> str | None:
    """`2x NVIDIA A100-SXM4-40GB` from the devices' model names, or None when the run did not record them."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in counts.items()) or None


def _device_energy(run: RunDir) -> tuple[EnergyProfile, str, int, float | None]:
    """The devices' energy over time, how it was obtained, the samples used and the timeline scale."""
    s = run.summary
    if run.traces:
        edges_s = np.array([s.start_s, s.end_s])
        sampled_j = sum(float(np.diff(t.cumulative_energy_j(edges_s))[0]) for t in run.traces)
        samples = sum(
            int(np.count_nonzero((t.timestamps_s >= s.start_s) & (t.timestamps_s <= s.end_s))) for t in run.traces
        )
        if sampled_j > 0:
            scale = s.energy_j / sampled_j
            method = (
                "power timeline (power.csv, linear between samples) integrated against the PUE and "
                "intensity series, scaled to the devices' energy counters"
            )
            return TimelineEnergy(run.traces, scale), method, samples, scale
        uniform = "power.csv has no power within the run: device energy spread uniformly over the run"
    else:
        uniform = "power.csv missing: device energy spread uniformly over the run"
    return UniformEnergy(s.energy_j, s.start_s, s.end_s), uniform, 0, None


def report_json(report: RunReport) -> str:
    """The report as JSON; a non-finite figure (none is expected) is written as null, never as NaN."""
    return json_text(asdict(report)) + "\n"


def report_csv_row(report: RunReport) -> dict[str, CsvCell]:
    """The report's scalar figures as one CSV row (lists and plans as JSON text)."""
    row: dict[str, CsvCell] = {}
    for key, value in asdict(report).items():
        if key in ("epochs", "settings_timeline"):
            continue
        row[key] = value if value is None or isinstance(value, str | int | float) else json.dumps(value)
    return row


#: The most bytes of an earlier `report.json` read back to carry its facility inputs.
_EARLIER_REPORT_BYTES = 64 * 1024 * 1024
#: An electricity cost: any finite amount (prices may be negative).
_ANY_COST = Bound("electricity cost", "", None, math.inf)


def carry_inputs(given: FacilityInputs, out_dir: str | os.PathLike[str]) -> tuple[FacilityInputs, list[str]]:
    """The facility inputs of a report made (again) into `out_dir`, and the ones carried, as text to tell.

    A PUE, carbon intensity or price that is not given now, but that the report already in `out_dir`
    (its `report.json`) was made with, is kept, so that making the report again (for `--html` or `--plot`)
    never silently replaces a statement made with `--pue` and `--intensity` by one that has neither. Each
    carried input is the earlier report's energy-weighted figure over this same run, which gives the same
    facility energy, emissions and cost, under the earlier source's name. An earlier report that cannot be
    read (missing, not wattwise's, not trusted) carries nothing.
    """
    try:
        earlier = read_trusted_json(Path(out_dir) / REPORT_JSON, max_bytes=_EARLIER_REPORT_BYTES)
    except (OSError, UntrustedFile, ValueError):
        return given, []
    if earlier.get("schema") != REPORT_SCHEMA:
        return given, []
    carried: list[str] = []
    carry = given

    def within(value: float | None, bound: Bound) -> float | None:
        return (
            value if value is not None and (bound.low is None or value >= bound.low) and value <= bound.high else None
        )

    def figure(key: str, bound: Bound) -> float | None:
        value = earlier.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            return None
        return within(float(value), bound)

    def source(key: str, unsupplied: str) -> str | None:
        text = earlier.get(key)
        if not isinstance(text, str) or text in (unsupplied, NOT_SUPPLIED):
            return None
        return " ".join(text.split())[:500] or None  # one line, as the statement prints it

    pue, pue_source = figure("pue_effective", bounds.PUE), source("pue_source", PUE_NOT_SUPPLIED)
    if given.pue is None and pue is not None and pue_source is not None:
        carry = replace(carry, pue=Constant(pue, pue_source))
        carried.append(f"--pue {pue:.4g} ({pue_source})")
    intensity = figure("intensity_effective_g_per_kwh", bounds.INTENSITY_G_PER_KWH)
    intensity_source = source("intensity_source", NOT_SUPPLIED)
    if given.intensity is None and intensity is not None and intensity_source is not None:
        carry = replace(carry, intensity=Constant(intensity, intensity_source))
        carried.append(f"--intensity {intensity:.4g} gCO2e/kWh ({intensity_source})")
    cost, facility_kwh = figure("cost", _ANY_COST), figure("facility_energy_kwh", bounds.ENERGY_KWH)
    price = within(cost / facility_kwh, bounds.PRICE_PER_KWH) if cost is not None and facility_kwh else None
    price_source = source("price_source", NOT_SUPPLIED)
    if given.price is None and price is not None and price_source is not None:
        carry = replace(carry, price=Constant(price, price_source))
        currency = earlier.get("currency")
        if given.currency is None and isinstance(currency, str):
            carry = replace(carry, currency=" ".join(currency.split())[:20] or None)
        carried.append(f"--price {price:.4g} ({price_source})")
    return carry, carried


def write_report(report: RunReport, out_dir: Path) -> list[Path]:
    """Write `report.json`, `report.csv` and `energy_statement.md` into `out_dir`.

    Each file is created, or a regular file of its name replaced whole (`replace_file`: a link planted there
    is replaced, never followed); a device, FIFO or folder at a name, or an `out_dir` that is a link or no
    folder, is refused with one line (`NotARegularFile`), and a write that fails (a full disk) raises, so
    nothing is said to be written.
    """
    output_dir(out_dir, flag="--out")
    json_path, csv_path, md_path = out_dir / REPORT_JSON, out_dir / REPORT_CSV, out_dir / STATEMENT_MD
    for path in (json_path, csv_path, md_path):  # all three refused before any is written
        check_writable_target(path, user_named=False)
    write_text(json_path, report_json(report))
    row = report_csv_row(report)

    def write_csv(handle: TextIO) -> None:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        writer.writeheader()
        writer.writerow(row)

    replace_file(csv_path, write_csv)
    write_text(md_path, energy_statement(report))
    return [json_path, csv_path, md_path]


#: Significant digits of the statement's emissions (a figure for a paper: `462 g CO2e`, `12.53 kg CO2e`).
STATEMENT_DIGITS = 3


def sig(value: float, digits: int = 4) -> str:
    """`value` to `digits` significant digits, never in exponent notation (statement figures)."""
    return str(np.format_float_positional(value, precision=digits, unique=False, fractional=False, trim="-"))


def _as_markdown_text(report: RunReport) -> RunReport:
    """`report` with the texts a statement quotes (host, devices, region, sources) escaped for Markdown.

    A hostname or a device name is the machine's, not the statement's author's: `<`, `>` and `&` in it are
    shown as they are, never rendered as HTML where the statement is pasted.
    """
    import html

    def text(value: str | None) -> str | None:
        return None if value is None else html.escape(value, quote=False)

    return replace(
        report,
        hostname=text(report.hostname),
        region=text(report.region),
        hardware=text(report.hardware),
        devices=[html.escape(d, quote=False) for d in report.devices],
        pue_source=html.escape(report.pue_source, quote=False),
        intensity_source=html.escape(report.intensity_source, quote=False),
        price_source=html.escape(report.price_source, quote=False),
        currency=text(report.currency),
    )


def energy_statement(report: RunReport) -> str:
    """The energy statement in Markdown; each figure is a field of `report`, rounded for reading."""
    r = _as_markdown_text(report)
    lines = ["## Energy statement", ""]
    if r.simulated:
        lines += [
            "> **Simulated.** These figures come from wattwise's simulated GPU model, not from hardware "
            "measurements; they illustrate the method and must not be reported as measured.",
            "",
        ]
    host = r.hostname or "an unnamed host"
    where = f"{host} in {r.region}" if r.region else f"{host} (region not stated)"
    keys = f"device{'s' if len(r.devices) > 1 else ''} {', '.join(r.devices)}" if r.devices else "devices not listed"
    what = f"{r.hardware} ({keys})" if r.hardware else keys
    label = simulated_label(r.simulated, r.simulated_driven_by)
    measured = label or f"measured with {r.backend or 'an unnamed backend'}"
    cpu = (
        f" plus {sig(r.cpu_energy_j / J_PER_KWH)} kWh of CPU and DRAM energy"
        if r.cpu_energy_j
        else "; CPU and DRAM energy was not measured"
    )
    duration = f"{sig(r.time_s / 3600, 3)} h" if r.time_s >= 3600 else f"{sig(r.time_s, 3)} s"
    para = [
        f"Training ran on {where} with {what}, from {_when(r.start_time)} to {_when(r.end_time)} ({duration}).",
    ]
    if r.status and r.status not in (RunStatus.COMPLETED, "ok", "success"):
        para.append(f"The run did not complete (status: {r.status}).")
    para.append(
        f"The GPUs used {_resolved(r, r.device_energy_kwh, 1 / J_PER_KWH)} kWh "
        f"({_resolved(r, r.device_energy_j, 1.0, joules=True)} J, {measured}){cpu}."
    )
    if r.pue_source == PUE_NOT_SUPPLIED:
        para.append(
            "The facility's power usage effectiveness (PUE) was not supplied, so facility energy is taken "
            f"as equal to IT energy ({_resolved(r, r.facility_energy_kwh, r.pue_effective / J_PER_KWH)} kWh): "
            "a lower bound."
        )
    else:
        para.append(
            f"With a power usage effectiveness (PUE) of {r.pue_effective:.3f} (energy-weighted over the "
            f"run; source: {r.pue_source}), the facility used "
            f"{_resolved(r, r.facility_energy_kwh, r.pue_effective / J_PER_KWH)} kWh."
        )
    if r.emissions_kg_co2e is None or r.intensity_effective_g_per_kwh is None:
        para.append("Emissions were not estimated: carbon intensity: not supplied.")
    else:
        para.append(
            f"At a grid carbon intensity of {sig(r.intensity_effective_g_per_kwh)} gCO2e/kWh "
            f"(energy-weighted; source: {r.intensity_source}), this corresponds to "
            f"{_emissions(r)}."
        )
    if r.cost is not None:
        para.append(f"The electricity cost {sig(r.cost)} {r.currency or 'price units'} (source: {r.price_source}).")
    lines += [" ".join(para), "", _steps_taken(r), ""]
    lines.append(
        f"*Method: {r.energy_method}. Emissions are facility energy times the grid's carbon intensity "
        f"at the time of use. Produced by wattwise {r.wattwise_version or 'unknown version'}.*"
    )
    return "\n".join(lines) + "\n"


def _steps_taken(r: RunReport) -> str:
    steps = []
    if r.power_limit_note is not None:
        steps.append(r.power_limit_note)
    elif r.power_limit_w is not None:
        details = []
        if r.power_limit_selector:
            eta = (
                f", eta = {r.power_limit_eta:g}"
                if r.power_limit_selector == Selector.COST and r.power_limit_eta
                else ""
            )
            details.append(f"selector: {r.power_limit_selector}{eta}")
        if r.power_limit_reused:
            origin = f"run {r.power_limit_reused_from}" if r.power_limit_reused_from else "an earlier run"
            details.append(f"reused from {origin} of the same job, which chose it; not profiled again")
        elif r.power_limits_profiled:
            details.append(f"chosen from a profile of {r.power_limits_profiled} power limit{_plural(r)}")
        if r.tuning_unfinished is not None:
            details.append(f"tuning did not finish: {r.tuning_unfinished}; no saving is claimed")
        how = f" ({'; '.join(details)})" if details else ""
        steps.append(f"the GPU power limit was set to {r.power_limit_w:g} W{how}")
    if r.carbon_aware_intensity_source is not None and r.carbon_aware_threshold_g_per_kwh is not None:
        steps.append(
            "the power limit followed the grid's carbon intensity (the energy-optimal limit at and above "
            f"{r.carbon_aware_threshold_g_per_kwh:g} gCO2e/kWh; intensity: {r.carbon_aware_intensity_source})"
        )
    if r.batch_size is not None:
        steps.append(f"the batch size applied was {r.batch_size}")
    if r.frequency_plan:
        steps.append("a GPU frequency plan was followed")
    if not steps:
        return "Steps taken to reduce energy: none recorded."
    text = "Steps taken to reduce energy: " + "; ".join(steps) + "."
    if r.payback and r.power_limit_note is None:
        return text + "\n\n" + "\n".join(f"- {line}" for line in r.payback) + _run_saving_at_facility(r)
    if (
        r.energy_saved_j is not None
        and r.baseline_energy_j
        and r.power_limit_note is None
        and r.saving_resolved is False
    ):
        saved = with_uncertainty(
            r.energy_saved_j / J_PER_KWH, (r.energy_saved_uncertainty_j or 0.0) / J_PER_KWH, "kWh", places=6
        )
        text += (
            f" Against a baseline of {sig(r.baseline_energy_j / J_PER_KWH)} kWh of GPU energy, the estimated "
            f"saving ({saved}) is not resolved: it is within its measurement uncertainty, so no saving is claimed."
        )
    elif r.energy_saved_j is not None and r.baseline_energy_j and r.power_limit_note is None:
        text += (
            f" Against a baseline of {sig(r.baseline_energy_j / J_PER_KWH)} kWh of GPU energy, this saved "
            f"{sig(r.energy_saved_j / J_PER_KWH)} kWh ({100 * (r.energy_saved_fraction or 0.0):.1f}%)"
        )
        if r.facility_energy_saved_kwh is not None:
            text += f", about {sig(r.facility_energy_saved_kwh)} kWh at the facility"
        if r.emissions_saved_kg_co2e is not None:
            text += f" and {readable.emissions(r.emissions_saved_kg_co2e, digits=STATEMENT_DIGITS)}"
        text += " at this run's PUE and intensity."
    return text


def _plural(r: RunReport) -> str:
    return "" if r.power_limits_profiled == 1 else "s"


def _run_saving_at_facility(r: RunReport) -> str:
    """This run's saving (tuning included) at the facility and in emissions, at this run's PUE and intensity."""
    if r.run_energy_saved_j is None or r.run_energy_saved_j <= 0:
        return ""
    facility_kwh = r.run_energy_saved_j * r.pue_effective / J_PER_KWH
    text = f"\n\nAt this run's PUE and intensity, this run's saving is about {sig(facility_kwh)} kWh at the facility"
    if r.intensity_effective_g_per_kwh is not None:
        kg = facility_kwh * r.intensity_effective_g_per_kwh / 1000.0
        text += f" and {readable.emissions(kg, digits=STATEMENT_DIGITS)}"
    return text + "."


def _joules(energy_j: float) -> str:
    """Whole joules for real runs, significant digits for tiny ones (a demo's fraction of a joule)."""
    return f"{energy_j:.0f}" if abs(energy_j) >= 1000 else sig(energy_j)


def _resolved(r: RunReport, value: float, per_device_j: float, *, joules: bool = False) -> str:
    """A figure derived from the devices' energy (`per_device_j` of it per joule), to what the counters resolved.

    Its uncertainty is the devices' energy's, scaled alike; without one (a summary that does not say, an
    exact counter) the figure keeps the statement's usual digits.
    """
    u_j = r.device_energy_uncertainty_j
    if not u_j or u_j <= 0:
        return _joules(value) if joules else sig(value)
    return with_uncertainty(value, u_j * per_device_j)


def _emissions(r: RunReport) -> str:
    """The run's emissions in g, kg or t CO2e, to what the counters resolved (as `_resolved`)."""
    assert r.emissions_kg_co2e is not None
    u_j = r.device_energy_uncertainty_j
    uncertainty_kg = u_j * _kg_per_j(r) if u_j and u_j > 0 else None
    return readable.emissions(r.emissions_kg_co2e, uncertainty_kg, digits=STATEMENT_DIGITS)


def _kg_per_j(r: RunReport) -> float:
    """Emissions (kg CO2e) per joule of device energy in this report (0 when it has no energy)."""
    if r.emissions_kg_co2e is None or not r.device_energy_j:
        return 0.0
    return r.emissions_kg_co2e / (r.it_energy_j or r.device_energy_j)


def _when(iso: str) -> str:
    """`2026-11-21T21:00:00+00:00` as `2026-11-21 21:00 UTC`."""
    return iso[:16].replace("T", " ") + " UTC"
