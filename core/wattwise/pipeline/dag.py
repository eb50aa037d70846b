"""The computation DAG of one pipeline iteration.

One node per instruction: (stage, instruction, microbatch). Edges:

- within a stage, each instruction precedes the next one in execution order (a GPU runs one at a time);
- across stages, F(s, m) -> F(s+1, m) (activations flow down) and B(s+1, m) -> B(s, m) (gradients flow
  back up).

Nodes are numbered stage by stage in execution order, so `dag.stage_nodes(s)` is a contiguous range and a
plan (one value per node) reads, per stage, in the order the stage runs it. Longest paths are computed
level by level with numpy, for one plan or many plans at once (the frontier solver evaluates thousands).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from wattwise.errors import UsageError
from wattwise.pipeline.schedule import BACKWARD, FORWARD, INSTRUCTIONS, Instruction, Schedule, Step, build_schedule

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
#: Most instructions (stages x 2 x microbatches) one iteration may have: planning keeps per-node arrays
#: for thousands of plans at once.
MAX_NODES = 50_000


@dataclass(frozen=True, eq=False)
class PipelineDag:
    """Nodes, edges and evaluation order of one iteration of a pipeline schedule."""

    schedule_name: str
    num_stages: int
    num_microbatches: int
    #: Per stage, the steps in execution order (node ids follow this order, stage after stage).
    steps: tuple[tuple[Step, ...], ...]
    #: Per node: stage, instruction index into `INSTRUCTIONS` (0 forward, 1 backward), microbatch.
    stage_of: IntArray
    instruction_of: IntArray
    microbatch_of: IntArray
    #: Edges as parallel arrays: `edge_tails[k] -> edge_heads[k]`.
    edge_tails: IntArray
    edge_heads: IntArray
    #: Per node, its predecessors padded with `num_nodes` (a virtual node that finishes at time 0).
    preds: IntArray
    #: Per node, its successors padded with `num_nodes` (a virtual node that starts at the deadline).
    succs: IntArray
    #: Nodes grouped by depth: every predecessor of a node lies in an earlier group.
    levels: tuple[IntArray, ...]

    @property
    def num_nodes(self) -> int:
        """Number of instructions (nodes) in the DAG."""
        return int(self.stage_of.shape[0])

    def stage_nodes(self, stage: int) -> range:
        """Node ids of `stage`, in execution order."""
        start = sum(len(s) for s in self.steps[:stage])
        return range(start, start + len(self.steps[stage]))

    def node(self, stage: int, instruction: Instruction, microbatch: int) -> int:
        """Node id of one instruction."""
        for node in self.stage_nodes(stage):
            step = self.steps[stage][node - self.stage_nodes(stage).start]
            if step.instruction == instruction and step.microbatch == microbatch:
                return node
        raise KeyError((stage, instruction, microbatch))

    def sources(self) -> IntArray:
        """Nodes without predecessors."""
        has_pred = np.zeros(self.num_nodes, dtype=bool)
        has_pred[self.edge_heads] = True
        return np.flatnonzero(~has_pred)

    def sinks(self) -> IntArray:
        """Nodes without successors."""
        has_succ = np.zeros(self.num_nodes, dtype=bool)
        has_succ[self.edge_tails] = True
        return np.flatnonzero(~has_succ)

    def finish_times(self, durations: NDArray[np.floating]) -> FloatArray:
        """Earliest finish time of every node, for one plan (shape (N,)) or a batch (shape (B, N))."""
        values: FloatArray = np.asarray(durations, dtype=np.float64)
        by_node = self.finish_times_by_node(values.reshape(-1, self.num_nodes).T)
        return np.asarray(by_node.T.reshape(values.shape))

    def finish_times_by_node(self, durations: FloatArray) -> FloatArray:
        """Earliest finish times for a node-major batch: `durations` and the result have shape (N, B)."""
        finish = np.zeros((self.num_nodes + 1, durations.shape[1]))
        for level in self.levels:
            finish[level] = finish[self.preds[level]].max(axis=1) + durations[level]
        return finish[: self.num_nodes]

    def latest_finish_times_by_node(self, durations: FloatArray, deadline: FloatArray) -> FloatArray:
        """Latest finish times such that the iteration ends by `deadline` (shape (B,)); node-major (N, B)."""
        latest_start = np.empty((self.num_nodes + 1, durations.shape[1]))
        latest_start[self.num_nodes] = deadline
        latest_finish = np.empty((self.num_nodes, durations.shape[1]))
        for level in reversed(self.levels):
            latest_finish[level] = latest_start[self.succs[level]].min(axis=1)
            latest_start[level] = latest_finish[level] - durations[level]
        return latest_finish

    def makespan(self, durations: NDArray[np.floating]) -> FloatArray:
        """Longest path (iteration time) for one plan (a 0-d array) or a batch (shape (B,))."""
        return np.asarray(self.finish_times(durations).max(axis=-1))


def build_dag(schedule: Schedule, schedule_name: str = "custom") -> PipelineDag:
    """The DAG of `schedule`; rejects schedules that miss an instruction or deadlock."""
    num_stages = len(schedule)
    if num_stages == 0:
        raise UsageError("a schedule needs at least one stage")
    num_microbatches = sum(1 for step in schedule[0] if step.instruction == FORWARD)
    ids: dict[tuple[int, str, int], int] = {}
    stage_of: list[int] = []
    instruction_of: list[int] = []
    microbatch_of: list[int] = []
    for stage, steps in enumerate(schedule):
        expected = {(ins, m) for ins in INSTRUCTIONS for m in range(num_microbatches)}
        seen = {(step.instruction, step.microbatch) for step in steps}
        if seen != expected or len(steps) != len(expected):
            raise UsageError(
                f"stage {stage} of the schedule must run forward and backward of microbatches "
                f"0..{num_microbatches - 1} exactly once each"
            )
        for step in steps:
            ids[(stage, step.instruction, step.microbatch)] = len(stage_of)
            stage_of.append(stage)
            instruction_of.append(INSTRUCTIONS.index(step.instruction))
            microbatch_of.append(step.microbatch)

    tails: list[int] = []
    heads: list[int] = []
    offset = 0
    for steps in schedule:
        for k in range(len(steps) - 1):
            tails.append(offset + k)
            heads.append(offset + k + 1)
        offset += len(steps)
    for stage in range(num_stages - 1):
        for m in range(num_microbatches):
            tails.append(ids[(stage, FORWARD, m)])
            heads.append(ids[(stage + 1, FORWARD, m)])
            tails.append(ids[(stage + 1, BACKWARD, m)])
            heads.append(ids[(stage, BACKWARD, m)])

    num_nodes = len(stage_of)
    tails_arr = np.asarray(tails, dtype=np.int64)
    heads_arr = np.asarray(heads, dtype=np.int64)
    preds, levels = _levels(num_nodes, tails_arr, heads_arr)
    succs, _ = _levels(num_nodes, heads_arr, tails_arr)
    return PipelineDag(
        schedule_name=schedule_name,
        num_stages=num_stages,
        num_microbatches=num_microbatches,
        steps=tuple(tuple(steps) for steps in schedule),
        stage_of=np.asarray(stage_of, dtype=np.int64),
        instruction_of=np.asarray(instruction_of, dtype=np.int64),
        microbatch_of=np.asarray(microbatch_of, dtype=np.int64),
        edge_tails=tails_arr,
        edge_heads=heads_arr,
        preds=preds,
        succs=succs,
        levels=levels,
    )


def check_dag_size(num_stages: int, num_microbatches: int, *, option: str = "microbatches") -> None:
    """Refuse, before building it, a DAG of more than `MAX_NODES` instructions; `option` names the fix."""
    nodes = 2 * num_stages * num_microbatches
    if nodes > MAX_NODES:
        raise UsageError(
            f"{option} {num_microbatches} with {num_stages} stages makes {nodes} instructions per "
            f"iteration to plan (at most {MAX_NODES}); lower {option} to at most "
            f"{max(1, MAX_NODES // (2 * num_stages))}"
        )


def pipeline_dag(schedule_name: str, num_stages: int, num_microbatches: int) -> PipelineDag:
    """The DAG of a named schedule ("1f1b" or "gpipe"), of at most `MAX_NODES` instructions."""
    if isinstance(num_stages, int) and isinstance(num_microbatches, int):
        check_dag_size(num_stages, num_microbatches)
    return build_dag(build_schedule(schedule_name, num_stages, num_microbatches), schedule_name.lower())


def _levels(num_nodes: int, tails: IntArray, heads: IntArray) -> tuple[IntArray, tuple[IntArray, ...]]:
    """Padded predecessor lists and depth levels (Kahn's algorithm); raises on a cycle."""
    in_degree = np.bincount(heads, minlength=num_nodes)
    width = max(1, int(in_degree.max(initial=0)))
    preds = np.full((num_nodes, width), num_nodes, dtype=np.int64)
    fill = np.zeros(num_nodes, dtype=np.int64)
    successors: list[list[int]] = [[] for _ in range(num_nodes)]
    for tail, head in zip(tails.tolist(), heads.tolist(), strict=True):
        preds[head, fill[head]] = tail
        fill[head] += 1
        successors[tail].append(head)
    remaining = in_degree.copy()
    frontier = [n for n in range(num_nodes) if remaining[n] == 0]
    levels: list[IntArray] = []
    placed = 0
    while frontier:
        levels.append(np.asarray(frontier, dtype=np.int64))
        placed += len(frontier)
        following: list[int] = []
        for node in frontier:
            for succ in successors[node]:
                remaining[succ] -= 1
                if remaining[succ] == 0:
                    following.append(succ)
        frontier = following
    if placed != num_nodes:
        raise UsageError("the schedule deadlocks: its instruction order and the pipeline dependencies form a cycle")
    return preds, tuple(levels)
