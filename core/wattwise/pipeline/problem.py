"""A planning problem: a profile laid over a pipeline DAG, plus the power a blocked GPU draws.

Both solvers and every reported figure go through `PlanningProblem.evaluate`, so a plan's time and
energy always come from the profile itself:

    time   T = longest path of the DAG with each instruction's profiled time
    energy E = sum(e_i) + P_blocking * (S * T - sum(t_i))

(each of the S GPUs is powered for the whole iteration; while it runs no instruction it waits for its
neighbours and draws the blocking power).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from wattwise.errors import UsageError
from wattwise.pipeline.dag import FloatArray, IntArray, PipelineDag
from wattwise.pipeline.profiles import PipelineProfile
from wattwise.pipeline.schedule import INSTRUCTIONS

Number = TypeVar("Number", float, FloatArray)


def iteration_energy_j(
    instruction_energy_j: Number,
    instruction_time_s: Number,
    iteration_time_s: Number,
    num_stages: int,
    p_blocking_w: float,
) -> Number:
    """Energy of one iteration: what the instructions burn plus what blocked GPUs burn.

    `instruction_energy_j` and `instruction_time_s` are sums over every instruction of every stage.
    """
    return instruction_energy_j + p_blocking_w * (num_stages * iteration_time_s - instruction_time_s)


@dataclass(frozen=True, eq=False)
class PlanningProblem:
    """Per node of `dag`, the measured options of its (stage, instruction), in flat arrays.

    Options are numbered globally: the options of type k = 2 * stage + instruction index are
    `type_offsets[k]:type_offsets[k + 1]`, highest frequency first. A *choice* is one global option
    index per node; plans are stored as choices and turned into frequencies at the edges.
    """

    profile: PipelineProfile
    dag: PipelineDag
    p_blocking_w: float
    option_frequency_mhz: IntArray
    option_time_s: FloatArray
    option_energy_j: FloatArray
    type_offsets: IntArray
    node_type: IntArray

    @classmethod
    def build(cls, profile: PipelineProfile, dag: PipelineDag, p_blocking_w: float) -> PlanningProblem:
        """Lay `profile` over `dag`; the profile must have exactly the DAG's stages."""
        if not (isinstance(p_blocking_w, int | float) and math.isfinite(p_blocking_w) and p_blocking_w >= 0):
            raise UsageError(
                f"p_blocking_w (the power of a GPU waiting on a peer) must be a finite number of "
                f"watts >= 0 (got {p_blocking_w!r})"
            )
        if profile.num_stages != dag.num_stages:
            raise UsageError(
                f"the profile has {profile.num_stages} stages but the pipeline has {dag.num_stages}; "
                "profile every stage of this pipeline"
            )
        freqs: list[int] = []
        times: list[float] = []
        energies: list[float] = []
        offsets = [0]
        for stage in range(profile.num_stages):
            for instruction in INSTRUCTIONS:
                for m in profile.options(stage, instruction):
                    freqs.append(m.frequency_mhz)
                    times.append(m.time_s)
                    energies.append(m.energy_j)
                offsets.append(len(freqs))
        return cls(
            profile=profile,
            dag=dag,
            p_blocking_w=float(p_blocking_w),
            option_frequency_mhz=np.asarray(freqs, dtype=np.int64),
            option_time_s=np.asarray(times, dtype=np.float64),
            option_energy_j=np.asarray(energies, dtype=np.float64),
            type_offsets=np.asarray(offsets, dtype=np.int64),
            node_type=dag.stage_of * len(INSTRUCTIONS) + dag.instruction_of,
        )

    @property
    def num_types(self) -> int:
        """Number of instruction types, (stage, forward or backward) pairs."""
        return int(self.type_offsets.shape[0] - 1)

    def type_options(self, kind: int) -> range:
        """Global option indices of one (stage, instruction) type."""
        return range(int(self.type_offsets[kind]), int(self.type_offsets[kind + 1]))

    def max_frequency_choice(self) -> IntArray:
        """Every instruction at its highest profiled frequency (what GPUs do by default)."""
        return self.type_offsets[self.node_type].copy()

    def choice_for_frequencies(self, frequencies_mhz: NDArray[np.integer]) -> IntArray:
        """The choice that runs node i at `frequencies_mhz[i]`; every frequency must be profiled."""
        frequencies = np.asarray(frequencies_mhz, dtype=np.int64)
        choice = np.empty(self.dag.num_nodes, dtype=np.int64)
        for kind in range(self.num_types):
            nodes = np.flatnonzero(self.node_type == kind)
            options = np.arange(self.type_offsets[kind], self.type_offsets[kind + 1])
            lookup = {int(f): int(o) for f, o in zip(self.option_frequency_mhz[options], options, strict=True)}
            for node in nodes.tolist():
                freq = int(frequencies[node])
                if freq not in lookup:
                    stage, ins = divmod(kind, len(INSTRUCTIONS))
                    raise UsageError(
                        f"stage {stage} {INSTRUCTIONS[ins]} was not profiled at {freq} MHz; use a profiled frequency"
                    )
                choice[node] = lookup[freq]
        return choice

    def evaluate(self, choice: NDArray[np.integer]) -> tuple[FloatArray, FloatArray]:
        """Real iteration time (s) and energy (J) of one choice (shape (N,)) or a batch (shape (B, N))."""
        choices: IntArray = np.asarray(choice, dtype=np.int64)
        time_s, energy_j = self.evaluate_by_node(choices.reshape(-1, self.dag.num_nodes).T)
        shape = choices.shape[:-1]
        return time_s.reshape(shape), energy_j.reshape(shape)

    def evaluate_by_node(self, choice: IntArray) -> tuple[FloatArray, FloatArray]:
        """Real iteration times and energies of a node-major batch of choices (shape (N, B))."""
        times = self.option_time_s[choice]
        iteration_s = self.dag.finish_times_by_node(times).max(axis=0)
        energy_j = iteration_energy_j(
            self.option_energy_j[choice].sum(axis=0),
            times.sum(axis=0),
            iteration_s,
            self.dag.num_stages,
            self.p_blocking_w,
        )
        return iteration_s, np.asarray(energy_j)
