"""The energy of a model across all its runs, and its disclosure under the EU AI Act.

`wattwise report --job NAME` sums every run the history holds for the job (a run resumed from a
checkpoint, each run of a recurring job, a retry: each is a run of its own) into one `JobReport`: device,
IT and facility energy, emissions, time, and the uncertainty of the device energy (the runs' combined in
quadrature: their counters are independent). Each run whose folder is still there is reported as
`wattwise report` reports it (its power timeline against the PUE and intensity); a run whose folder is
gone counts with the figures its history row kept (device energy and time, the PUE and intensity taken as
constants), and the report names it.

Two statements: the paper's (`job_statement`), and the "known or estimated energy consumption" that the
EU AI Act asks of providers of general-purpose AI models in their technical documentation (Regulation (EU)
2024/1689, Annex XI, Section 1, point 2(e)): `eu_ai_act_statement`, which says how the figure was obtained
and what it leaves out.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wattwise import readable
from wattwise.carbon.integrate import J_PER_KWH
from wattwise.carbon.series import Constant
from wattwise.errors import UsageError
from wattwise.record.report import (
    PUE_NOT_SUPPLIED,
    STATEMENT_DIGITS,
    FacilityInputs,
    RunReport,
    check_summary,
    sig,
)
from wattwise.safe_files import json_text, output_dir, write_text
from wattwise.store.history import RunRow
from wattwise.vocabulary import StatementKind

JOB_REPORT_SCHEMA = "wattwise.job-report/1"
#: The files `--out` gets: the job's report and its statement.
JOB_REPORT_JSON, JOB_STATEMENT_MD = "job_report.json", "job_energy_statement.md"


@dataclass(frozen=True)
class JobReport:
    """A model's energy over every run of its job (see the module docstring)."""

    job: str | None
    runs: int
    #: Runs by how they ended ("completed": 3, "interrupted": 1).
    statuses: dict[str, int]
    #: Runs whose figures come from the simulated GPU, not a measurement.
    simulated_runs: int
    first_start_time: str
    last_end_time: str
    time_s: float
    device_energy_j: float
    #: The device energy's uncertainty (J); None when a run's is unknown.
    device_energy_uncertainty_j: float | None
    #: Measured CPU and DRAM energy (J) of the runs that measured it; None when none did.
    cpu_energy_j: float | None
    it_energy_j: float
    facility_energy_j: float
    #: None when no carbon intensity was supplied.
    emissions_kg_co2e: float | None
    pue_source: str
    intensity_source: str
    devices: list[str]
    backends: list[str]
    run_ids: list[str]
    #: Runs counted from their history row because their folder is gone (their device energy only).
    from_history_only: list[str] = field(default_factory=list)
    schema: str = JOB_REPORT_SCHEMA

    @property
    def device_energy_kwh(self) -> float:
        """The device energy in kWh."""
        return self.device_energy_j / J_PER_KWH

    @property
    def facility_energy_kwh(self) -> float:
        """The facility energy in kWh."""
        return self.facility_energy_j / J_PER_KWH

    def to_json(self) -> str:
        """The report as JSON (kWh figures included)."""
        data = asdict(self)
        data.update(device_energy_kwh=self.device_energy_kwh, facility_energy_kwh=self.facility_energy_kwh)
        return json_text(data) + "\n"


def _row_report(row: RunRow, inputs: FacilityInputs) -> tuple[float, float, float | None]:
    """(IT energy, facility energy, emissions) of a run known only from its row: constants only."""
    pue = inputs.pue.value if isinstance(inputs.pue, Constant) else 1.0
    facility_j = row.energy_j * pue
    if isinstance(inputs.intensity, Constant):
        return row.energy_j, facility_j, facility_j / J_PER_KWH * inputs.intensity.value / 1000.0
    return row.energy_j, facility_j, None


def job_report(
    job: str | None,
    reports: Sequence[RunReport],
    *,
    rows_only: Sequence[RunRow] = (),
    run_ids: Sequence[str] = (),
    inputs: FacilityInputs | None = None,
) -> JobReport:
    """Sum the runs of a job: those with a report, and those known only from their history row.

    Args:
        job: The job's name (None: a single run reported as one).
        reports: The runs reported from their folders.
        rows_only: The runs whose folder is gone, from their history rows.
        run_ids: Every run's id, in the order they started.
        inputs: The PUE and intensity, applied as constants to `rows_only`.
    """
    inputs = inputs or FacilityInputs()
    statuses = Counter((r.status or "unknown") for r in reports) + Counter((r.status or "unknown") for r in rows_only)
    uncertainties = [r.device_energy_uncertainty_j for r in reports] + [r.energy_uncertainty_j for r in rows_only]
    known = [u for u in uncertainties if u is not None]
    cpu = [r.cpu_energy_j for r in reports if r.cpu_energy_j is not None]
    from_rows = [_row_report(row, inputs) for row in rows_only]
    emissions = [r.emissions_kg_co2e for r in reports] + [e for _, _, e in from_rows]
    starts = [r.start_time for r in reports] + [r.start_time for r in rows_only]
    ends = [r.end_time for r in reports] + [r.end_time for r in rows_only]
    devices = sorted({d for r in reports for d in r.devices} | {d for r in rows_only for d in r.devices})
    pue_sources = sorted({r.pue_source for r in reports} or {PUE_NOT_SUPPLIED})
    intensity_sources = sorted({r.intensity_source for r in reports} or {"not supplied"})
    return JobReport(
        job=job,
        runs=len(reports) + len(rows_only),
        statuses=dict(sorted(statuses.items())),
        simulated_runs=sum(r.simulated for r in reports) + sum(r.simulated for r in rows_only),
        first_start_time=min(starts),
        last_end_time=max(ends),
        time_s=sum(r.time_s for r in reports) + sum(r.time_s for r in rows_only),
        device_energy_j=sum(r.device_energy_j for r in reports) + sum(r.energy_j for r in rows_only),
        device_energy_uncertainty_j=math.hypot(*known) if len(known) == len(uncertainties) else None,
        cpu_energy_j=sum(cpu) if cpu else None,
        it_energy_j=sum(r.it_energy_j for r in reports) + sum(it for it, _, _ in from_rows),
        facility_energy_j=sum(r.facility_energy_j for r in reports) + sum(f for _, f, _ in from_rows),
        emissions_kg_co2e=None if any(e is None for e in emissions) else sum(e for e in emissions if e is not None),
        pue_source="; ".join(pue_sources),
        intensity_source="; ".join(intensity_sources),
        devices=devices,
        backends=sorted({r.backend for r in reports if r.backend}),
        run_ids=list(run_ids),
        from_history_only=[row.id for row in rows_only],
    )


def _kwh(report: JobReport, energy_j: float) -> str:
    """A figure in kWh, with the device energy's uncertainty scaled to it when known."""
    from wattwise.record.summary import with_uncertainty

    u = report.device_energy_uncertainty_j
    if not u or not report.device_energy_j:
        return f"{sig(energy_j / J_PER_KWH)} kWh"
    return with_uncertainty(energy_j / J_PER_KWH, u * energy_j / report.device_energy_j / J_PER_KWH, "kWh")


def _runs_phrase(r: JobReport) -> str:
    how = ", ".join(f"{n} {status}" for status, n in r.statuses.items())
    return f"{r.runs} run{'s' if r.runs != 1 else ''} ({how})"


def _period(r: JobReport) -> str:
    return f"from {r.first_start_time[:16].replace('T', ' ')} UTC to {r.last_end_time[:16].replace('T', ' ')} UTC"


def _simulated_banner(r: JobReport) -> list[str]:
    if not r.simulated_runs:
        return []
    which = "All" if r.simulated_runs == r.runs else f"{r.simulated_runs} of {r.runs}"
    return [
        f"> **Simulated.** {which} runs come from wattwise's simulated GPU model, not from hardware "
        "measurements; their figures illustrate the method and must not be reported as measured.",
        "",
    ]


def _how_measured(backends: Sequence[str]) -> str:
    """` (measured through nvml)`, ` (the simulated GPU's figures, not measurements)`, both, or nothing."""
    measured = [b for b in backends if b != "simulated"]
    parts = [f"measured through {', '.join(measured)}"] if measured else []
    if "simulated" in backends:
        parts.append("the simulated GPU's figures, not measurements")
    return f" ({'; '.join(parts)})" if parts else ""


def job_statement(r: JobReport) -> str:
    """The paper's energy statement for a whole job (Markdown)."""
    name = f"job {r.job}" if r.job else "the run"
    lines = [f"## Energy statement: {name}", "", *_simulated_banner(r)]
    para = [
        f"Training took {_runs_phrase(r)} {_period(r)}, {readable.duration(r.time_s, 3)} in all, on "
        f"{', '.join(r.devices) or 'devices not listed'}.",
        f"The GPUs used {_kwh(r, r.device_energy_j)} in all runs together.",
    ]
    if r.cpu_energy_j:
        para.append(f"CPU and DRAM used {sig(r.cpu_energy_j / J_PER_KWH)} kWh more, where measured.")
    para.append(f"With the PUE ({r.pue_source}) the facility used {_kwh(r, r.facility_energy_j)}.")
    if r.emissions_kg_co2e is None:
        para.append("Emissions were not estimated: carbon intensity: not supplied.")
    else:
        para.append(
            f"At the grid's carbon intensity ({r.intensity_source}) this is "
            f"{readable.emissions(r.emissions_kg_co2e, digits=STATEMENT_DIGITS)}."
        )
    lines += [" ".join(para), ""]
    if r.from_history_only:
        lines += [
            f"{len(r.from_history_only)} run(s) whose folder is gone count with their recorded device energy "
            f"only: {', '.join(r.from_history_only)}.",
            "",
        ]
    return "\n".join(lines)


def eu_ai_act_statement(r: JobReport) -> str:
    """The "known or estimated energy consumption" of the model, as Annex XI 1.2(e) of the EU AI Act asks (Markdown).

    It states the figure, whether it is known (measured) or estimated, the method, the period and the
    resources, and what the figure leaves out.
    """
    measured = r.runs - r.simulated_runs
    if measured == 0:
        kind = "not known: every run is simulated, so this is an illustration, not a disclosure"
    elif r.simulated_runs:
        kind = f"known for {measured} measured run(s); {r.simulated_runs} simulated run(s) must be excluded or replaced"
    else:
        kind = "known: measured with the GPUs' energy counters"
    facility_kind = (
        "estimated as equal to the IT energy (no PUE was supplied): a lower bound"
        if PUE_NOT_SUPPLIED in r.pue_source
        else f"estimated with the PUE ({r.pue_source})"
    )
    cpu = (
        f"CPU and DRAM energy of the runs that measured it: {sig(r.cpu_energy_j / J_PER_KWH)} kWh (RAPL)"
        if r.cpu_energy_j
        else "CPU and DRAM energy (not measured)"
    )
    lines = [
        "## Energy consumption of the model (EU AI Act, Annex XI, Section 1, point 2(e))",
        "",
        *_simulated_banner(r),
        f"- **Model / training job:** {r.job or 'one run'}",
        f"- **Energy consumption for training (GPUs):** {_kwh(r, r.device_energy_j)}, {kind}.",
        f"- **Facility energy:** {_kwh(r, r.facility_energy_j)}, {facility_kind}.",
    ]
    if r.emissions_kg_co2e is not None:
        emitted = readable.emissions(r.emissions_kg_co2e, digits=STATEMENT_DIGITS)
        lines.append(f"- **Emissions (for information):** {emitted} ({r.intensity_source}).")
    lines += [
        f"- **Period and runs:** {_runs_phrase(r)}, {_period(r)}; {readable.duration(r.time_s, 3)} of training in all.",
        f"- **Computational resources:** {', '.join(r.devices) or 'not listed'}{_how_measured(r.backends)}.",
        "- **Method:** wattwise read each GPU's energy counter at the start and end of every training run "
        "(a resume from a checkpoint, each run of a recurring job and each retry is a run of its own) and "
        "summed the runs; the uncertainty combines each run's counter resolution in quadrature. Facility "
        "energy multiplies the runs' power timeline by the PUE over time.",
        f"- **Not measured, so not included:** {cpu}; networking, storage and other servers; cooling and "
        "power conversion beyond the PUE; data preparation, evaluation and inference outside the recorded "
        "training runs; runs not recorded by wattwise; idle time between runs; the energy embodied in the "
        "hardware.",
    ]
    if r.from_history_only:
        lines.append(
            f"- **Runs counted from the history only** (their folder is gone; device energy and time as "
            f"recorded, PUE and intensity as constants): {', '.join(r.from_history_only)}."
        )
    lines += ["", f"*Produced by wattwise from {r.runs} run record(s); run ids: {', '.join(r.run_ids) or '-'}.*", ""]
    return "\n".join(lines)


def report_job(
    job: str,
    inputs: FacilityInputs,
    *,
    rows: Sequence[RunRow],
    statement: StatementKind | str,
    as_json: bool,
    out: Path | None,
) -> int:
    """`wattwise report --job NAME`: print the job's statement (or its JSON); write both into `out` if given.

    `rows` are the job's runs in the history (`wattwise.store.runs.list_runs`), oldest first.

    Returns:
        The exit status.

    Raises:
        UsageError: no run of the job in the history, or a facility input that does not cover a run.
    """
    from wattwise.record.files import read_run_dir
    from wattwise.record.report import build_report

    if not rows:
        raise UsageError(f"--job: no run of job {job!r} in the run history (see `wattwise runs list`)")
    reports, rows_only = [], []
    for row in rows:
        try:
            run_dir = read_run_dir(row.folder)
            check_summary(run_dir)
        except UsageError:  # the folder is gone, or its summary damaged or impossible: the row's figures
            rows_only.append(row)
            continue
        reports.append(build_report(run_dir, inputs))
    report = job_report(job, reports, rows_only=rows_only, run_ids=[row.id for row in rows], inputs=inputs)
    report = dataclasses.replace(report, devices=sorted({name for row in rows for name in row.devices}))
    text = eu_ai_act_statement(report) if statement == StatementKind.EU_AI_ACT else job_statement(report)
    if out is not None:
        output_dir(out, flag="--out")
        for name, content in ((JOB_REPORT_JSON, report.to_json()), (JOB_STATEMENT_MD, text)):
            write_text(out / name, content)
            print(f"wrote {out / name}", file=sys.stderr)
    print(report.to_json() if as_json else text, end="")
    return 0
