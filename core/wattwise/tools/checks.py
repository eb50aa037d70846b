"""What the acceptance checks share: results, outcomes, the context and the load.

A check's result, its two outcomes besides passing, the context every check is given, and the
matrix-multiply load that keeps a real GPU busy.

Both `wattwise.tools.acceptance` (the runner and its hardware checks) and `wattwise.tools.levers` (the
lever checks) build on these, so neither imports the other for them.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from wattwise.devices.base import Device, DeviceDescription, DeviceSpec

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
#: Why a check that needs a GPU is skipped.
NO_GPU = "no NVIDIA GPU found through NVML, nor AMD GPU through amdsmi"


class CheckDict(TypedDict):
    """One check as `acceptance.json` lists it (`CheckResult.to_dict`)."""

    name: str
    status: str
    reason: str | None
    #: What it measured: each check's own figures (SI units in their names).
    figures: dict[str, Any]
    kept_from: NotRequired[str]


class GpuInfo(TypedDict):
    """The GPU under test, as `acceptance.json` names it."""

    index: int
    name: str
    describe: DeviceDescription


class AcceptanceReport(TypedDict):
    """`acceptance.json`: where and when the checks ran, on which GPU, and each check's result."""

    schema: str
    time: str
    host: str
    gpu: GpuInfo | None
    simulated: bool
    versions: dict[str, str | None]
    quick: bool
    notes: list[str]
    checks: list[CheckDict]
    #: How many checks passed, failed and were skipped.
    summary: dict[str, int]


@dataclasses.dataclass
class CheckResult:
    """One check: its status, why (for a skip or a failure), and what it measured (SI units)."""

    name: str
    status: str
    reason: str | None = None
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: When an earlier run into the same folder passed it (the check was kept, not run again), else None.
    kept_from: str | None = None

    def to_dict(self) -> CheckDict:
        """The check as `acceptance.json` lists it."""
        out: CheckDict = {"name": self.name, "status": self.status, "reason": self.reason, "figures": self.figures}
        if self.kept_from is not None:
            out["kept_from"] = self.kept_from
        return out


class Skip(Exception):
    """A check cannot run here; the message says why."""


class Failure(Exception):
    """A check ran and found something wrong; the message says what."""


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]], *, left: int = 1) -> list[str]:
    """A Markdown table of `acceptance.md`: the header, its rule, then one line a row.

    The first `left` columns are aligned left, the others (figures) right; an empty cell is written `| |`.
    """

    def line(cells: Sequence[object]) -> str:
        return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"

    rule = "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"
    return [line(header), rule, *(line(row) for row in rows)]


# -- the load ------------------------------------------------------------------------------------------
class MatmulLoad:
    """Square bf16 matrix multiplies on one CUDA device: `step()` runs a batch of them and waits for it."""

    def __init__(self, cuda_index: int, size: int = 8192, per_step: int = 8) -> None:
        self.cuda_index, self.size, self.per_step = cuda_index, size, per_step
        self._a: Any = None

    def unavailable(self) -> str | None:
        """Why no load can run here, or None."""
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if not torch.cuda.is_available():
            return f"torch {torch.__version__} sees no CUDA device (a CPU build, or no driver)"
        if self.cuda_index >= torch.cuda.device_count():
            return f"CUDA device {self.cuda_index} does not exist (CUDA_VISIBLE_DEVICES?)"
        return None

    def step(self) -> float:
        """One batch of multiplies, synchronised; its wall time in seconds."""
        import torch

        if self._a is None:
            device = torch.device("cuda", self.cuda_index)
            self._a = torch.randn(self.size, self.size, device=device, dtype=torch.bfloat16)
        start = time.perf_counter()
        out = self._a
        for _ in range(self.per_step):
            out = torch.mm(self._a, self._a)
        torch.cuda.synchronize(self.cuda_index)
        del out
        return time.perf_counter() - start

    def enqueue(self, count: int) -> None:
        """Queue `count` multiplies without waiting for them: the GPU stays busy while the host polls."""
        import torch

        if self._a is None:
            self.step()
        for _ in range(count):
            torch.mm(self._a, self._a)

    def run_for(self, seconds: float) -> list[float]:
        """Steps until `seconds` have passed; each step's time."""
        times, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            times.append(self.step())
        return times

    def sync(self) -> None:
        """Wait for the multiplies queued on the device (the monitor's `sync` when windows are timed)."""
        import torch

        torch.cuda.synchronize(self.cuda_index)


# -- checks --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Context:
    """What the checks share: the GPUs found, the one under test, its load, the output folder, options."""

    gpus: list[Device]
    gpu: Device | None
    load: MatmulLoad | None
    out: Path
    quick: bool
    #: Starts a process that sets `watts` on the GPU of `spec` through the guard and waits to be killed.
    spawn_holder: Callable[[DeviceSpec, float], subprocess.Popen[bytes]]
    #: Figures one check leaves for another (the power-limit profile for the clock check's CSV).
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)

    def seconds(self, full: float) -> float:
        """How long to load the GPU for a check that wants `full` seconds: a fifth with `--quick`, 2 s at least."""
        return max(2.0, full / 5) if self.quick else full

    def require_gpu(self) -> Device:
        """The GPU under test.

        Raises:
            Skip: there is none.
        """
        if self.gpu is None:
            raise Skip(NO_GPU)
        return self.gpu

    def require_load(self) -> MatmulLoad:
        """The load on the GPU under test.

        Raises:
            Skip: there is no GPU under test, or no load can run on it (no torch, no CUDA, no such device).
        """
        self.require_gpu()
        if self.load is None:
            raise Skip("no load for this GPU")
        reason = self.load.unavailable()
        if reason is not None:
            raise Skip(reason)
        return self.load


#: A check: what it measured (figures of JSON values, SI units in their names), or it raises Skip or Failure.
Check = Callable[[Context], Mapping[str, Any]]
