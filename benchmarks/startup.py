"""Benchmark the start-up of the `wattwise` command: wall and CPU seconds of whole processes.

    python benchmarks/startup.py [--data ../shared/data] [--repeats 5] [--launcher "python old_main.py"]
                                 [--importtime 8] [--out DIR]

Each case runs `--repeats` times as a fresh process; per case: the median and the minimum of the wall time
and of the CPU time (user + sys of the whole process, from `wait4`, which a busy machine inflates far less
than the wall time). Then each case runs once under `-X importtime` (PYTHONPROFILEIMPORTTIME=1) and the
packages that cost the most import time (self time summed per top-level package) are listed. Cases: `wattwise --help`,
`wattwise frontier --help`, `wattwise plan` (no slowdown, and for a straggler) on a frontier written
beforehand, and the GPT-3 175B / A100 8-stage 12-microbatch `wattwise frontier` (whose solve is part of
its time). `--launcher` replaces the installed `wattwise` script, to time another entry point the same way.
Results go to stdout (markdown) and DIR/results.json (DIR defaults to <tmp>/wattwise-benchmark-startup).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import wattwise

PROFILE = "perseus/stage_profile/gpt3-175b+a100_sxm_bf16.csv"


@dataclass
class Row:
    case: str
    repeats: int
    wall_median_s: float
    wall_min_s: float
    cpu_median_s: float
    cpu_min_s: float
    top_imports_ms: dict[str, float]


def cases(data: Path, work: Path) -> dict[str, list[str]]:
    """Case name -> the arguments of `wattwise`."""
    frontier = [
        "frontier",
        str(data / PROFILE),
        "--microbatches",
        "12",
        "--unit-time",
        "0.001",
        "--p-blocking",
        "83.64",
        "--out",
        str(work / "f.json"),
        "--quiet",
    ]
    return {
        "wattwise --help": ["--help"],
        "wattwise frontier --help": ["frontier", "--help"],
        "wattwise plan": ["plan", str(work / "f.json"), "--out", str(work / "plan.json")],
        "wattwise plan --straggler-time": [
            "plan",
            str(work / "f.json"),
            "--straggler-time",
            "3.4",
            "--out",
            str(work / "plan.json"),
        ],
        "wattwise frontier (GPT-3 8x12)": frontier,
    }


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one process; it must exit 0."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} exited {process.returncode}: {stderr.strip()}")
    return wall_s, usage.ru_utime + usage.ru_stime


def top_imports(launcher: list[str], argv: list[str], count: int) -> dict[str, float]:
    """Import self time (ms) summed per top-level package, the `count` largest (`PYTHONPROFILEIMPORTTIME`)."""
    done = subprocess.run(
        [*launcher, *argv],
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    per_package: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if self_us.isdigit():
            per_package[name.split(".")[0]] += int(self_us) / 1000
    ranked = sorted(per_package.items(), key=lambda item: -item[1])[:count]
    return {name: round(ms, 1) for name, ms in ranked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--launcher", help="command that stands for `wattwise` (default: the installed script)")
    parser.add_argument("--importtime", type=int, default=8, metavar="N", help="packages listed per case")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "wattwise-benchmark-startup")
    args = parser.parse_args()
    if args.launcher:
        launcher = shlex.split(args.launcher)
    else:
        script = shutil.which("wattwise", path=os.path.dirname(sys.executable))
        launcher = [script] if script else [sys.executable, "-m", "wattwise"]
    args.out.mkdir(parents=True, exist_ok=True)
    # wattwise's bytecode, as `pip install` leaves it: with PYTHONDONTWRITEBYTECODE set, an editable install
    # never writes it, and every timed process would compile the package first (about 0.05 s).
    compileall.compile_dir(Path(wattwise.__file__).parent, quiet=1)
    work = Path(tempfile.mkdtemp(prefix="wattwise-startup-"))
    all_cases = cases(args.data, work)
    timed([*launcher, *all_cases["wattwise frontier (GPT-3 8x12)"]])  # the frontier the plan cases read
    rows: list[Row] = []
    for name, argv in all_cases.items():
        walls, cpus = zip(*(timed([*launcher, *argv]) for _ in range(args.repeats)), strict=True)
        rows.append(
            Row(
                name,
                args.repeats,
                statistics.median(walls),
                min(walls),
                statistics.median(cpus),
                min(cpus),
                top_imports(launcher, argv, args.importtime),
            )
        )
    print(
        f"launcher: {shlex.join(launcher)}; {args.repeats} runs per case; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}\n"
    )
    print("| case | wall median (s) | wall min (s) | CPU median (s) | CPU min (s) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.case} | {row.wall_median_s:.3f} | {row.wall_min_s:.3f} | {row.cpu_median_s:.3f} | "
            f"{row.cpu_min_s:.3f} |"
        )
    print("\nimport self time per top-level package (ms, one run under -X importtime):\n")
    for row in rows:
        print(f"- {row.case}: " + ", ".join(f"{k} {v:g}" for k, v in row.top_imports_ms.items()))
    (args.out / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
