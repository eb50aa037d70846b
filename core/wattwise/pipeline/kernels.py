"""The frontier solver's compiled kernels (`_kernels.c`), and what to use where they are not built.

The C extension is built with the package when a C compiler is at hand (`pip install` builds it; it is an
optional extension, so an install without a compiler still works). It does the rounding of
`wattwise.pipeline.rounding` one plan at a time, in cache, with the same floating-point operations as the
numpy code (same plans, to the last bit), and the relaxation's shortest paths without importing scipy's
sparse graph module (a third of a small frontier's run time is that import). What that buys is measured in
docs/benchmarks.md (2.3-4.6x less CPU time on the Perseus profiles, and less memory).

`AVAILABLE` says whether it is used: set `WATTWISE_KERNELS=0` to force the numpy (and scipy) code, e.g. to
compare the two. Arrays here are plan-major, shape (plans, nodes) in node order. Outputs may be given
(`out=`): a solver reuses the same buffers batch after batch, since first touching fresh memory (page
faults) costs more than the kernels themselves.
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np

from wattwise.errors import UsageError
from wattwise.pipeline.dag import FloatArray, IntArray
from wattwise.pipeline.rounding import LevelPicker

_module: ModuleType | None
try:
    from wattwise.pipeline import _kernels as _module  # type: ignore[attr-defined, no-redef]
except ImportError:  # built without a C compiler: numpy and scipy do the work
    _module = None

#: Option indices of the plans `track` and `polish` take and give (half the memory traffic of int64).
PLAN_DTYPE = np.int32

#: Whether the compiled kernels are used (built, and not turned off with WATTWISE_KERNELS=0).
AVAILABLE = _module is not None and os.environ.get("WATTWISE_KERNELS", "1").strip() != "0"


def threads() -> int:
    """Threads `track` and `polish` split their plans over.

    The CPUs this process may run on (its affinity: a SLURM or container allocation), at most
    `WATTWISE_THREADS` when set. The plans do not depend on it.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    limit = os.environ.get("WATTWISE_THREADS", "").strip()
    if limit:
        try:
            cap = int(limit)
        except ValueError:
            cap = 0
        if cap < 1:
            raise UsageError(
                f"WATTWISE_THREADS must be a positive integer (got {limit!r}); unset it to use every "
                "CPU this process may run on"
            )
        cpus = min(cpus, cap)
    return max(1, min(cpus, 64))


def _kernels() -> ModuleType:
    if _module is None:
        raise RuntimeError("wattwise's compiled kernels are not built (reinstall with a C compiler)")
    return _module


class CompiledPicker:
    """A `LevelPicker`'s lookup and DAG layout as flat arrays in the rounding's row order, for the C kernels."""

    def __init__(self, picker: LevelPicker) -> None:
        option_map, layout = picker.map, picker.layout
        self.n = len(layout.order)
        # Per row (rounding order), the first and last entry of its type in the map.
        node_type = picker.row_type
        self.picker_args = (
            np.ascontiguousarray(option_map.first[node_type], dtype=np.int64),
            np.ascontiguousarray(option_map.last[node_type], dtype=np.int64),
            np.ascontiguousarray(option_map.choice, dtype=PLAN_DTYPE),
            np.ascontiguousarray(option_map.times, dtype=np.float64),
        )
        self.threads = threads()
        self.order = np.ascontiguousarray(layout.order, dtype=np.int64)
        self.preds = np.ascontiguousarray(layout.preds, dtype=np.int64)
        self.succs = np.ascontiguousarray(layout.succs, dtype=np.int64)

    def layout_args(self, plans: int, *, succs: bool = False) -> tuple[object, ...]:
        """The kernels' arguments after the picker's: the sizes, `plans`, the threads and the DAG layout.

        `succs`: with the successors too (`polish` walks both ways, `track` forward only).
        """
        if succs:
            kp, ks = self.preds.shape[1], self.succs.shape[1]
            return (self.n, kp, ks, plans, self.threads, self.order, self.preds, self.succs)
        return (self.n, self.preds.shape[1], plans, self.threads, self.order, self.preds)


def _out(out: np.ndarray | None, shape: tuple[int, ...], dtype: type[np.generic]) -> np.ndarray:
    if out is None:
        return np.empty(shape, dtype=dtype)
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"output buffer: expected a C-contiguous {np.dtype(dtype)} array of shape {shape}")
    return out


class Totals:
    """Per output plan of `track` or `polish`, the sums of its options' energies and times.

    `energy_j` and `time_s` are added in node order as the numpy fallback does (`frontier._node_sum`),
    computed by the kernel while each block of plans is in cache.
    """

    def __init__(self, option_energy_j: FloatArray, option_time_s: FloatArray) -> None:
        self.option_energy_j = np.ascontiguousarray(option_energy_j, dtype=np.float64)
        self.option_time_s = np.ascontiguousarray(option_time_s, dtype=np.float64)
        self.energy_j: FloatArray = np.empty(0)
        self.time_s: FloatArray = np.empty(0)

    def args(self, plans: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Fresh output arrays for `plans` plans, and the kernel's arguments (option energies and times, outputs)."""
        self.energy_j, self.time_s = np.empty(plans), np.empty(plans)
        return self.option_energy_j, self.option_time_s, self.energy_j, self.time_s


def _totals(totals: Totals | None, plans: int) -> tuple[FloatArray, ...]:
    """The kernels' last arguments: `totals`' (`Totals.args`), or none when the sums are not wanted."""
    return totals.args(plans) if totals is not None else ()


def track(
    picker: CompiledPicker, target_finish_s: FloatArray, out: IntArray | None = None, totals: Totals | None = None
) -> tuple[IntArray, FloatArray]:
    """`rounding.track` for plans laid out (plans, nodes): choices and iteration times (and `totals` filled)."""
    target = np.ascontiguousarray(target_finish_s, dtype=np.float64)
    plans = target.shape[0]
    choice = _out(out, (plans, picker.n), PLAN_DTYPE)
    time_s = np.empty(plans)
    _kernels().track(picker.picker_args, *picker.layout_args(plans), target, choice, time_s, *_totals(totals, plans))
    return choice, time_s


def polish(
    picker: CompiledPicker,
    option_time_s: FloatArray,
    choice: IntArray,
    deadline_s: FloatArray,
    out: IntArray | None = None,
    totals: Totals | None = None,
) -> tuple[IntArray, FloatArray]:
    """`rounding.polish` for plans laid out (plans, nodes).

    New choices and iteration times (and `totals` filled).
    """
    start = np.ascontiguousarray(choice, dtype=PLAN_DTYPE)
    plans = start.shape[0]
    out = _out(out, (plans, picker.n), PLAN_DTYPE)
    time_s = np.empty(plans)
    _kernels().polish(
        picker.picker_args,
        *picker.layout_args(plans, succs=True),
        np.ascontiguousarray(option_time_s, dtype=np.float64),
        start,
        np.ascontiguousarray(deadline_s, dtype=np.float64),
        out,
        time_s,
        *_totals(totals, plans),
    )
    return out, time_s


def _breakpoints(
    potentials: IntArray, slower: IntArray, faster: IntArray, shift: IntArray
) -> tuple[int, int, tuple[IntArray, IntArray, IntArray, IntArray]]:
    """Two breakpoints' potentials and each plan's between them, as the relaxed kernels take them.

    The potentials' shape (rows, columns), and the four arrays C-contiguous int64.
    """
    p, lo, hi, sh = (np.ascontiguousarray(a, dtype=np.int64) for a in (potentials, slower, faster, shift))
    return p.shape[0], p.shape[1], (p, lo, hi, sh)


def node_finish_s(
    potentials: IntArray,
    nodes: int,
    slower: IntArray,
    faster: IntArray,
    shift: IntArray,
    resolution_s: float,
    out: FloatArray | None = None,
) -> FloatArray:
    """Relaxed finish time (s) of every node between two breakpoints' potentials, shape (plans, nodes)."""
    rows, columns, arrays = _breakpoints(potentials, slower, faster, shift)
    plans = len(slower)
    out = _out(out, (plans, nodes), np.float64)
    _kernels().node_finish(rows, columns, nodes, plans, float(resolution_s), *arrays, out)
    return out


def node_durations(
    potentials: IntArray, slower: IntArray, faster: IntArray, shift: IntArray, hi: IntArray, columns: IntArray
) -> FloatArray:
    """Relaxed duration of the nodes `columns` between two breakpoints' potentials, capped at `hi`.

    In units, exact in float64; shape (plans, len(columns)).
    """
    rows, width, arrays = _breakpoints(potentials, slower, faster, shift)
    columns = np.ascontiguousarray(columns, dtype=np.int64)
    nodes, plans = len(hi), len(slower)
    out = np.empty((plans, len(columns)))
    _kernels().node_durations(
        rows, width, nodes, plans, *arrays, np.ascontiguousarray(hi, dtype=np.int64), columns, out
    )
    return out


def dijkstra(indptr: IntArray, indices: IntArray, weights: FloatArray, source: int) -> FloatArray:
    """Shortest distances from `source` over a CSR graph of non-negative weights (infinite: no arc)."""
    nodes = len(indptr) - 1
    out = np.empty(nodes)
    _kernels().dijkstra(
        nodes,
        source,
        np.ascontiguousarray(indptr, dtype=np.int64),
        np.ascontiguousarray(indices, dtype=np.int64),
        np.ascontiguousarray(weights, dtype=np.float64),
        out,
    )
    return out
