"""One process of two, the other scripted: the collective of the run-level unit tests (tests/unit/run/)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wattwise.distributed import Collective

#: A short tuning of the simulated GPU, measured without sampling or CUDA synchronisation.
TUNE = [
    "power_limit.mode=tune",
    "power_limit.wait_steps=0",
    "power_limit.warmup_steps=1",
    "power_limit.profile_steps=2",
    "power_limit.step_w=100",
    "monitor.sample_power=false",
    "monitor.sync_cuda=false",
    "log_every_n_steps=50",
]  # 300, 200, 100 W: windows end at steps 3, 6, 9


class TwoProcesses(Collective):
    """Rank 0 of two; rank 1 mirrors this process's figures, and fails from its step `fails_at` on."""

    rank, world_size = 0, 2

    def __init__(self, fails_at: int | None = None) -> None:
        self.fails_at = fails_at
        self.step = 0
        #: The step of each decision point (an agreement on which processes failed).
        self.asked: list[int] = []

    def _other_reason(self) -> str | None:
        failed = self.fails_at is not None and self.step >= self.fails_at
        return "setting the power limit to 200 W failed (gpu1: the GPU has fallen off the bus)" if failed else None

    def all_gather(self, obj: Any) -> list[Any]:
        if obj is None or isinstance(obj, str):  # a decision point: each process's reason (wattwise.run.agreement)
            self.asked.append(self.step)
            return [obj, self._other_reason()]
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], bool):  # agree_opening: (reason, sim)
            self.asked.append(self.step)
            return [obj, (self._other_reason(), obj[1])]
        if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[1], float):  # agree_tuning: (reason, period)
            self.asked.append(self.step)
            return [obj, (self._other_reason(), obj[1])]
        return [obj, obj] if not isinstance(obj, dict) else [obj]

    def combine(self, windows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(float(t), 2 * float(e)) for t, e in windows]
