"""Malformed input to every `wattwise` command: exit code 2, one line on stderr naming what to fix.

Each case builds its own bad file (or flag) in `tmp_path` and runs `main(argv)` in-process. A bad file,
field or number must never end in a traceback, a hang or a wrong result printed as if it were right.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import wattwise.devices
from tests.support import ordinary_user
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml
from tests.support.pipeline import synthetic_profile
from wattwise.carbon.example import write_example
from wattwise.cli.main import main
from wattwise.config import load_config
from wattwise.errors import ConfigError
from wattwise.pipeline.profiles import write_profile

BINARY = bytes(range(256)) * 4
NOT_UTF8 = "timestamp,value\n2026-03-01T00:00:00+00:00,1.1\ncaf\xe9,1.2\n".encode("latin-1")
HUGE_LINE = "x" * 5_000_000 + "\n"
IS_ROOT = ordinary_user.IS_ROOT


@dataclass(frozen=True)
class Case:
    """A malformed input: `argv(tmp_path)` builds the files and returns the command line; the one error
    line must contain `names` (the file, field or flag to fix)."""

    id: str
    argv: Callable[[Path], list[str]]
    names: str
    needs_non_root: bool = False


# -- builders of bad (and good) files --------------------------------------------------------------


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def unreadable(path: Path, data: str = "a,b\n1,2\n") -> Path:
    write(path, data)
    path.chmod(0)
    return path


def run_dir(tmp: Path) -> Path:
    """A good run directory (the README's example run)."""
    return write_example(tmp / "example").run_dir


def run_dir_with(
    tmp: Path,
    *,
    summary: bytes | str | None = None,
    power: bytes | str | None = None,
    fields: dict[str, object] | None = None,
) -> Path:
    """The example run with its summary.json or power.csv replaced, or some summary fields changed."""
    directory = run_dir(tmp)
    if summary is not None:
        write(directory / "summary.json", summary)
    if power is not None:
        write(directory / "power.csv", power)
    if fields:
        data = json.loads((directory / "summary.json").read_text())
        data.update(fields)
        write(directory / "summary.json", json.dumps(data))
    return directory


def profile(tmp: Path) -> Path:
    path = tmp / "profile.csv"
    write_profile(synthetic_profile(2, 3, 0.001, seed=3), path)
    return path


def frontier_argv(profile_path: Path | str, tmp: Path, *extra: str) -> list[str]:
    return [
        "frontier",
        str(profile_path),
        "--microbatches",
        "4",
        "--unit-time",
        "0.001",
        "--p-blocking",
        "80",
        "--out",
        str(tmp / "frontier.json"),
        "--quiet",
        *extra,
    ]


def frontier_json(tmp: Path) -> Path:
    assert main(frontier_argv(profile(tmp), tmp)) == 0
    return tmp / "frontier.json"


def frontier_json_with(tmp: Path, **fields: object) -> Path:
    path = frontier_json(tmp)
    data = json.loads(path.read_text())
    data.update(fields)
    return write(tmp / "changed.json", json.dumps(data))


TRAIN = "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n" + "".join(
    f"d,n,{b},adam,0.1,{r},0.5,{e}\n" for b, e in ((32, 3), (64, 2)) for r in (0, 1)
)
POWER = "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n" + "".join(
    f"d,n,{b},adam,{w},{10 * 300 / w},{w * 0.8}\n" for b in (32, 64) for w in (200, 300)
)


def simulate_argv(
    tmp: Path, *, train: bytes | str = TRAIN, power: bytes | str = POWER, extra: tuple[str, ...] = ()
) -> list[str]:
    return [
        "simulate",
        "--train",
        str(write(tmp / "train.csv", train)),
        "--power",
        str(write(tmp / "power_a40.csv", power)),
        "--workload",
        "d/n",
        "--default-batch-size",
        "64",
        "--target-metric",
        "0.5",
        "--max-epochs",
        "10",
        *extra,
    ]


def advise_argv(*extra: str) -> list[str]:
    return [
        "advise",
        "--duration",
        "1h",
        "--energy-kwh",
        "1",
        "--window",
        "2h",
        "--now",
        "2026-03-01T00:00:00+00:00",
        *extra,
    ]


def not_a_database(tmp: Path) -> Path:
    return write(tmp / "jobs.sqlite", "this is a text file, not SQLite\n" * 100)


def demo_argv(*extra: str) -> list[str]:
    return ["demo", "--steps-after-tuning", "1", "--profile-steps", "1", "--warmup-steps", "0", *extra]


# -- the table --------------------------------------------------------------------------------------

CASES: list[Case] = [
    # devices / measure
    Case("devices-nvml-without-nvml", lambda t: ["devices", "--backend", "nvml"], "--backend"),
    Case("devices-unknown-backend", lambda t: ["devices", "--backend", "tpu"], "--backend"),
    Case("measure-nvml-without-nvml", lambda t: ["measure", "--backend", "nvml", "--", "true"], "--backend"),
    Case("measure-unknown-backend", lambda t: ["measure", "--backend", "x", "--", "true"], "--backend"),
    # demo: power model files, numbers, dotlist, folders
    Case(
        "demo-power-model-binary",
        lambda t: demo_argv("--power-model", str(write(t / "model.csv", BINARY))),
        "model.csv",
    ),
    Case(
        "demo-power-model-not-utf8",
        lambda t: demo_argv("--power-model", str(write(t / "model.csv", b"power_limit,time,power\n\xff\xfe,1,1\n"))),
        "model.csv",
    ),
    Case("demo-power-model-empty", lambda t: demo_argv("--power-model", str(write(t / "model.csv", ""))), "model.csv"),
    Case("demo-power-model-directory", lambda t: demo_argv("--power-model", str(t)), "{tmp}"),
    Case(
        "demo-power-model-unreadable",
        lambda t: demo_argv("--power-model", str(unreadable(t / "model.csv"))),
        "model.csv",
        needs_non_root=True,
    ),
    Case(
        "demo-power-model-huge-line",
        lambda t: demo_argv("--power-model", str(write(t / "model.csv", "power_limit,time,power\n" + HUGE_LINE))),
        "model.csv",
    ),
    Case(
        "demo-power-model-overflow",
        lambda t: demo_argv("--power-model", str(write(t / "model.csv", "power_limit,time,power\n1e999,1,100\n"))),
        "model.csv",
    ),
    Case("demo-eta-nan", lambda t: demo_argv("--eta", "nan"), "--eta"),
    Case("demo-max-slowdown-inf", lambda t: demo_argv("--max-slowdown", "inf"), "--max-slowdown"),
    Case("demo-step-w-nan", lambda t: demo_argv("--step-w", "nan"), "--step-w"),
    Case("demo-base-step-time-inf", lambda t: demo_argv("--base-step-time", "inf"), "--base-step-time"),
    Case("demo-broken-dotlist", lambda t: demo_argv("--set", "devices.gpus=[0,1"), "devices.gpus"),
    Case(
        "demo-dotlist-without-value",
        lambda t: demo_argv("--set", "monitor.sample_interval_s"),
        "monitor.sample_interval_s",
    ),
    Case("demo-dotlist-unknown-key", lambda t: demo_argv("--set", "monitor.nope=1"), "monitor.nope"),
    Case("demo-dotlist-section-as-list", lambda t: demo_argv("--set", "monitor=[1,2]"), "monitor"),
    Case("demo-output-dir-is-a-file", lambda t: demo_argv("--output-dir", str(write(t / "taken", "a file"))), "taken"),
    Case("demo-state-dir-is-a-file", lambda t: demo_argv("--state-dir", str(write(t / "taken", "a file"))), "taken"),
    # report: summary.json
    Case("report-summary-binary", lambda t: ["report", str(run_dir_with(t, summary=BINARY))], "summary.json"),
    Case(
        "report-summary-not-utf8",
        lambda t: ["report", str(run_dir_with(t, summary=b'{"job": "caf\xe9"}'))],
        "summary.json",
    ),
    Case("report-summary-empty", lambda t: ["report", str(run_dir_with(t, summary=""))], "summary.json"),
    Case("report-summary-a-list", lambda t: ["report", str(run_dir_with(t, summary="[1, 2]"))], "summary.json"),
    Case(
        "report-summary-energy-a-string",
        lambda t: ["report", str(run_dir_with(t, fields={"energy_j": "lots"}))],
        "energy_j",
    ),
    Case(
        "report-summary-devices-a-number", lambda t: ["report", str(run_dir_with(t, fields={"devices": 3}))], "devices"
    ),
    Case(
        "report-summary-start-time-a-number",
        lambda t: ["report", str(run_dir_with(t, fields={"start_time": 12}))],
        "start_time",
    ),
    Case("report-summary-time-1e300", lambda t: ["report", str(run_dir_with(t, fields={"time_s": 1e300}))], "time_s"),
    Case(
        "report-summary-energy-1.7e308",
        lambda t: ["report", str(run_dir_with(t, fields={"energy_j": 1.7e308}))],
        "energy_j",
    ),
    Case(
        "report-summary-deeply-nested",
        lambda t: ["report", str(run_dir_with(t, summary="[" * 100_000 + "]" * 100_000))],
        "summary.json",
    ),
    Case("report-summary-huge-line", lambda t: ["report", str(run_dir_with(t, summary=HUGE_LINE))], "summary.json"),
    Case(
        "report-summary-unreadable",
        lambda t: ["report", str(_summary_unreadable(t))],
        "summary.json",
        needs_non_root=True,
    ),
    Case("report-summary-a-directory", lambda t: ["report", str(_summary_a_directory(t))], "summary.json"),
    # report: power.csv
    Case("report-power-binary", lambda t: ["report", str(run_dir_with(t, power=BINARY))], "power.csv"),
    Case(
        "report-power-not-utf8",
        lambda t: ["report", str(run_dir_with(t, power=b"timestamp,device,power_w\n1,gpu\xff,100\n"))],
        "power.csv",
    ),
    Case("report-power-empty", lambda t: ["report", str(run_dir_with(t, power=""))], "power.csv"),
    Case(
        "report-power-short-row",
        lambda t: ["report", str(run_dir_with(t, power="timestamp,device,power_w\n1772323200,gpu0\n"))],
        "power.csv",
    ),
    Case("report-power-huge-line", lambda t: ["report", str(run_dir_with(t, power=HUGE_LINE))], "power.csv"),
    Case(
        "report-power-overflow",
        lambda t: ["report", str(run_dir_with(t, power="timestamp,device,power_w\n1772323200,gpu0,1e999\n"))],
        "power.csv",
    ),
    # report: the run directory and where the report goes
    Case("report-run-dir-is-a-file", lambda t: ["report", str(write(t / "run", "a file"))], "run"),
    Case(
        "report-run-dir-unreadable", lambda t: ["report", str(_unreadable_dir(run_dir(t)))], "run", needs_non_root=True
    ),
    Case(
        "report-out-is-a-file",
        lambda t: ["report", str(run_dir(t)), "--out", str(write(t / "taken", "a file"))],
        "taken",
    ),
    Case(
        "report-plot-is-a-file",
        lambda t: ["report", str(run_dir(t)), "--out", str(t / "o"), "--plot", str(write(t / "taken", "a file"))],
        "taken",
    ),
    # report and advise: PUE, intensity and price series
    Case(
        "report-pue-binary",
        lambda t: ["report", str(run_dir(t)), "--out", str(t), "--pue", str(write(t / "pue.csv", BINARY))],
        "pue.csv",
    ),
    Case(
        "report-intensity-not-utf8",
        lambda t: ["report", str(run_dir(t)), "--out", str(t), "--intensity", str(write(t / "ci.csv", NOT_UTF8))],
        "ci.csv",
    ),
    Case(
        "report-price-empty",
        lambda t: ["report", str(run_dir(t)), "--out", str(t), "--price", str(write(t / "price.csv", ""))],
        "price.csv",
    ),
    Case(
        "report-pue-unreadable",
        lambda t: ["report", str(run_dir(t)), "--out", str(t), "--pue", str(unreadable(t / "pue.csv"))],
        "pue.csv",
        needs_non_root=True,
    ),
    Case("report-pue-nan", lambda t: ["report", str(run_dir(t)), "--out", str(t), "--pue", "nan"], "--pue"),
    Case(
        "report-intensity-inf",
        lambda t: ["report", str(run_dir(t)), "--out", str(t), "--intensity", "inf"],
        "--intensity",
    ),
    Case("advise-pue-binary", lambda t: advise_argv("--pue", str(write(t / "pue.csv", BINARY))), "pue.csv"),
    Case(
        "advise-intensity-not-utf8", lambda t: advise_argv("--intensity", str(write(t / "ci.csv", NOT_UTF8))), "ci.csv"
    ),
    Case(
        "advise-price-huge-line", lambda t: advise_argv("--price", str(write(t / "price.csv", HUGE_LINE))), "price.csv"
    ),
    Case("advise-intensity-directory", lambda t: advise_argv("--intensity", str(t)), "--intensity"),
    Case(
        "advise-price-value-overflow",
        lambda t: advise_argv(
            "--price",
            str(write(t / "price.csv", "timestamp,value\n2026-03-01T00:00:00Z,1e999\n2026-03-01T01:00:00Z,1\n")),
        ),
        "price.csv",
    ),
    # advise: numbers and durations
    Case(
        "advise-window-overflow",
        lambda t: ["advise", "--duration", "1h", "--energy-kwh", "1", "--window", "99999999999999999999d"],
        "--window",
    ),
    Case(
        "advise-duration-overflow",
        lambda t: ["advise", "--duration", "1e308h", "--energy-kwh", "1", "--window", "1h"],
        "--duration",
    ),
    Case(
        "advise-energy-nan",
        lambda t: ["advise", "--duration", "1h", "--energy-kwh", "nan", "--window", "1h"],
        "--energy-kwh",
    ),
    Case(
        "advise-energy-inf",
        lambda t: ["advise", "--duration", "1h", "--energy-kwh", "inf", "--window", "1h"],
        "--energy-kwh",
    ),
    Case(
        "advise-energy-1.7e308",
        lambda t: ["advise", "--duration", "1h", "--energy-kwh", "1.7e308", "--window", "1h"],
        "--energy-kwh",
    ),
    # physical bounds (wattwise.bounds): values no machine, grid or facility has (issue 27)
    Case("advise-intensity-1e308", lambda t: advise_argv("--intensity", "1e308"), "--intensity"),
    Case("advise-pue-1e10", lambda t: advise_argv("--pue", "1e10"), "--pue"),
    Case("report-pue-1.7e308", lambda t: ["report", str(run_dir(t)), "--out", str(t), "--pue", "1.7e308"], "--pue"),
    Case(
        "simulate-average-power-1e300",
        lambda t: simulate_argv(t, power=POWER + "d,n,32,adam,250,12,1e300\n"),
        "average_power",
    ),
    Case(
        "plan-frontier-point-energy-1.7e308",
        lambda t: ["plan", str(_frontier_with_point(t, energy_j=1.7e308)), "--out", str(t / "plan.json")],
        "points[0]: energy_j",
    ),
    Case(
        "plan-straggler-1e300",
        lambda t: ["plan", str(frontier_json(t)), "--straggler-time", "1e300", "--out", str(t / "p.json")],
        "--straggler-time",
    ),
    Case(
        "run-cap-outside-mode-cap",
        lambda t: ["run", "--mode", "tune", "--cap-w", "250", "--", "true"],
        "--cap-w=250.0 is a cap, which applies only in mode 'cap'",
    ),
    Case("demo-gpus-negative", lambda t: demo_argv("--set", "devices.gpus=[-1]"), "devices.gpus"),
    Case("demo-gpus-beyond-the-simulated-ones", lambda t: demo_argv("--set", "devices.gpus=[5]"), "devices.gpus"),
    Case(
        "advise-now-garbage",
        lambda t: ["advise", "--duration", "1h", "--energy-kwh", "1", "--window", "1h", "--now", "yesterday"],
        "--now",
    ),
    # jobs: the store
    Case("jobs-list-not-a-database", lambda t: ["jobs", "list", "--store", str(not_a_database(t))], "jobs.sqlite"),
    Case("jobs-show-not-a-database", lambda t: ["jobs", "show", "x", "--store", str(not_a_database(t))], "jobs.sqlite"),
    Case(
        "jobs-reset-binary-store",
        lambda t: ["jobs", "reset", "x", "--store", str(write(t / "jobs.sqlite", BINARY))],
        "jobs.sqlite",
    ),
    Case("jobs-list-store-is-a-directory", lambda t: ["jobs", "list", "--store", str(t)], "{tmp}"),
    Case("jobs-list-malformed-url", lambda t: ["jobs", "list", "--store", "postgresql://u@host:port/db"], "host:port"),
    Case("jobs-list-unknown-scheme", lambda t: ["jobs", "list", "--store", "nosuchdb://x/y"], "nosuchdb"),
    Case("jobs-list-url-without-scheme", lambda t: ["jobs", "list", "--store", "://x"], "'://x'"),
    Case(
        "jobs-list-store-unreadable",
        lambda t: ["jobs", "list", "--store", str(unreadable(t / "jobs.sqlite"))],
        "jobs.sqlite",
        needs_non_root=True,
    ),
    # simulate: traces and numbers
    Case("simulate-train-binary", lambda t: simulate_argv(t, train=BINARY), "train.csv"),
    Case(
        "simulate-power-not-utf8",
        lambda t: simulate_argv(t, power=POWER.encode() + b"d,n,32,adam,250,\xff,1\n"),
        "power_a40.csv",
    ),
    Case("simulate-train-empty", lambda t: simulate_argv(t, train=""), "train.csv"),
    Case("simulate-train-short-row", lambda t: simulate_argv(t, train=TRAIN + "d,n,32\n"), "train.csv"),
    Case("simulate-power-huge-line", lambda t: simulate_argv(t, power=HUGE_LINE), "power_a40.csv"),
    Case("simulate-train-directory", lambda t: [*simulate_argv(t)[:2], str(t), *simulate_argv(t)[3:]], "--train"),
    Case(
        "simulate-power-overflow",
        lambda t: simulate_argv(t, power=POWER + "d,n,32,adam,250,1e999,100\n"),
        "power_a40.csv",
    ),
    Case("simulate-seed-negative", lambda t: simulate_argv(t, extra=("--seed", "-1")), "--seed"),
    Case("simulate-eta-nan", lambda t: simulate_argv(t, extra=("--eta", "nan")), "--eta"),
    Case("simulate-target-metric-nan", lambda t: simulate_argv(t, extra=("--target-metric", "nan")), "--target-metric"),
    # frontier: the profile, the flags, the outputs
    Case("frontier-profile-binary", lambda t: frontier_argv(write(t / "p.csv", BINARY), t), "p.csv"),
    Case(
        "frontier-profile-not-utf8",
        lambda t: frontier_argv(
            write(t / "p.csv", b"stage,instruction,frequency,time,energy\n0,forw\xe9rd,1,1,1\n"), t
        ),
        "p.csv",
    ),
    Case("frontier-profile-empty", lambda t: frontier_argv(write(t / "p.csv", ""), t), "p.csv"),
    Case("frontier-profile-directory", lambda t: frontier_argv(t, t), "{tmp}"),
    Case(
        "frontier-profile-unreadable", lambda t: frontier_argv(unreadable(t / "p.csv"), t), "p.csv", needs_non_root=True
    ),
    Case(
        "frontier-profile-huge-line",
        lambda t: frontier_argv(write(t / "p.csv", "stage,instruction,frequency,time,energy\n" + HUGE_LINE), t),
        "p.csv",
    ),
    Case(
        "frontier-profile-time-1e300",
        lambda t: frontier_argv(
            write(
                t / "p.csv",
                "stage,instruction,frequency,time,energy\n"
                "0,forward,1000,1e300,1\n0,forward,900,1,1\n"
                "0,backward,1000,1,1\n0,backward,900,1,1\n",
            ),
            t,
        ),
        "p.csv",
    ),
    Case("frontier-unit-time-nan", lambda t: frontier_argv(profile(t), t, "--unit-time", "nan"), "--unit-time"),
    Case("frontier-unit-time-tiny", lambda t: frontier_argv(profile(t), t, "--unit-time", "1e-12"), "--unit-time"),
    Case(
        "frontier-microbatches-huge",
        lambda t: frontier_argv(profile(t), t, "--microbatches", "10000000"),
        "--microbatches",
    ),
    Case("frontier-p-blocking-inf", lambda t: frontier_argv(profile(t), t, "--p-blocking", "inf"), "--p-blocking"),
    Case("frontier-out-is-a-directory", lambda t: [*frontier_argv(profile(t), t), "--out", str(t)], "{tmp}"),
    Case("frontier-csv-is-a-directory", lambda t: frontier_argv(profile(t), t, "--csv", str(t)), "{tmp}"),
    Case("frontier-plot-is-a-directory", lambda t: frontier_argv(profile(t), t, "--plot", str(t)), "--plot"),
    # plan: the frontier file, its shape, the output
    Case(
        "plan-frontier-binary",
        lambda t: ["plan", str(write(t / "f.json", BINARY)), "--out", str(t / "plan.json")],
        "f.json",
    ),
    Case(
        "plan-frontier-not-utf8",
        lambda t: ["plan", str(write(t / "f.json", b'{"schedule": "\xff"}')), "--out", str(t / "plan.json")],
        "f.json",
    ),
    Case(
        "plan-frontier-empty", lambda t: ["plan", str(write(t / "f.json", "")), "--out", str(t / "plan.json")], "f.json"
    ),
    Case("plan-frontier-directory", lambda t: ["plan", str(t), "--out", str(t / "plan.json")], "{tmp}"),
    Case(
        "plan-frontier-unreadable",
        lambda t: ["plan", str(unreadable(t / "f.json", "{}")), "--out", str(t / "plan.json")],
        "f.json",
        needs_non_root=True,
    ),
    Case(
        "plan-frontier-a-list",
        lambda t: ["plan", str(write(t / "f.json", "[]")), "--out", str(t / "plan.json")],
        "f.json",
    ),
    Case(
        "plan-frontier-points-not-a-list",
        lambda t: ["plan", str(frontier_json_with(t, points={"a": 1})), "--out", str(t / "plan.json")],
        "points",
    ),
    Case(
        "plan-frontier-plan-wrong-shape",
        lambda t: [
            "plan",
            str(frontier_json_with(t, points=[{"time_s": 1, "energy_j": 1, "plan": "fast"}])),
            "--out",
            str(t / "plan.json"),
        ],
        "plan",
    ),
    Case("plan-given-a-plan-json", lambda t: ["plan", str(_plan_json(t)), "--out", str(t / "again.json")], "PLAN.json"),
    Case(
        "plan-frontier-infinity",
        lambda t: [
            "plan",
            str(
                write(
                    t / "f.json", frontier_json(t).read_text().replace('"unit_time_s":0.001', '"unit_time_s":Infinity')
                )
            ),
            "--out",
            str(t / "plan.json"),
        ],
        "unit_time_s",
    ),
    Case(
        "plan-frontier-deeply-nested",
        lambda t: ["plan", str(write(t / "f.json", "[" * 100_000)), "--out", str(t / "plan.json")],
        "f.json",
    ),
    Case("plan-out-is-a-directory", lambda t: ["plan", str(frontier_json(t)), "--out", str(t)], "{tmp}"),
    Case(
        "plan-straggler-nan",
        lambda t: ["plan", str(frontier_json(t)), "--straggler-time", "nan", "--out", str(t / "p.json")],
        "--straggler-time",
    ),
]


def _summary_unreadable(tmp: Path) -> Path:
    directory = run_dir(tmp)
    (directory / "summary.json").chmod(0)
    return directory


def _summary_a_directory(tmp: Path) -> Path:
    directory = run_dir(tmp)
    (directory / "summary.json").unlink()
    (directory / "summary.json").mkdir()
    return directory


def _unreadable_dir(path: Path) -> Path:
    path.chmod(0)
    return path


def _frontier_with_point(tmp: Path, **fields: object) -> Path:
    """A good frontier whose first point has `fields` changed."""
    data = json.loads(frontier_json(tmp).read_text())
    data["points"][0].update(fields)
    return write(tmp / "point.json", json.dumps(data))


def _plan_json(tmp: Path) -> Path:
    assert main(["plan", str(frontier_json(tmp)), "--out", str(tmp / "plan.json")]) == 0
    return tmp / "plan.json"


@pytest.fixture(autouse=True)
def _no_nvml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No NVIDIA driver, whatever this machine has; simulated GPUs forgotten between cases."""
    FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    monkeypatch.setattr(wattwise.devices, "_SIMULATED", {})
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def restore_permissions(tmp_path: Path) -> Iterator[None]:
    """Give back the permissions a case took away, so pytest can delete tmp_path."""
    yield
    for root, dirs, files in os.walk(tmp_path, topdown=True):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o700, follow_symlinks=False)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_line_naming_it(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_permissions: None
) -> None:
    if case.needs_non_root and IS_ROOT:
        code, err, folder = _as_ordinary_user(case)
    else:
        argv = case.argv(tmp_path)
        capsys.readouterr()  # what building a good file printed
        code = main(argv)
        err, folder = capsys.readouterr().err, tmp_path
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert code == 2, err
    assert case.names.replace("{tmp}", str(folder)) in lines[0], lines[0]
    assert len(lines[0]) < 1000, lines[0][:200]
    if case.needs_non_root:  # the user learns it is their permissions, not the file's content
        assert "Permission denied" in lines[0], lines[0]


def _as_ordinary_user(case: Case) -> tuple[int, str, Path]:
    """Under root (CI), which reads any file: build the case's files, give them to an ordinary user, and
    run `wattwise` as that user (`ordinary_user.run_unprivileged`). Its exit code, stderr and the case's folder."""
    with ordinary_user.shared_folder("wattwise-bad-input-") as base:
        folder, home = base / "case", base / "home"
        folder.mkdir()
        home.mkdir()
        argv = case.argv(folder)
        done = ordinary_user.run_unprivileged(
            ["-m", "wattwise", *argv], env={"HOME": str(home)}, cwd=folder, owned=base
        )
        return done.returncode, done.stderr, folder


# -- YAML configuration files: no command reads one; the plugins' `config=` does ---------------------

YAML_CASES: dict[str, bytes | str | None] = {
    "top-level-list": "- 1\n- 2\n",
    "top-level-scalar": "42\n",
    "binary": BINARY,
    "not-utf8": b"monitor:\n  sample_interval_s: 0.1 # caf\xe9\n",
    "invalid-yaml": "monitor: [1, 2\n",
    "unreadable": None,
    "empty-is-fine": "",
}


@pytest.mark.parametrize("name", list(YAML_CASES))
def test_bad_yaml_config_is_a_one_line_config_error(name: str, tmp_path: Path, restore_permissions: None) -> None:
    data = YAML_CASES[name]
    path = tmp_path / "energy.yaml"
    if data is None:
        if IS_ROOT:
            _unreadable_yaml_as_ordinary_user()
            return
        unreadable(path, "monitor: {}\n")
    else:
        write(path, data)
    if name == "empty-is-fine":
        load_config([path])
        return
    with pytest.raises(ConfigError) as caught:
        load_config([path])
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "energy.yaml" in message, message


#: Loads the YAML file given, printing the ConfigError's message and exiting 3 on one.
LOAD_CONFIG = """
import sys
from wattwise.config import load_config
from wattwise.errors import ConfigError
try:
    load_config([sys.argv[1]])
except ConfigError as err:
    print(err)
    sys.exit(3)
"""


def _unreadable_yaml_as_ordinary_user() -> None:
    """The unreadable case under root: the user's own file they may not read, loaded as that user."""
    with ordinary_user.shared_folder("wattwise-bad-yaml-") as base:
        path = unreadable(base / "energy.yaml", "monitor: {}\n")
        done = ordinary_user.run_unprivileged(["-c", LOAD_CONFIG, str(path)], env={"HOME": str(base)}, cwd=base)
    assert done.returncode == 3, done.stderr
    message = done.stdout.strip()
    assert len(message.splitlines()) == 1 and "energy.yaml" in message and "Permission denied" in message, message


def test_a_directory_as_yaml_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config([tmp_path])
