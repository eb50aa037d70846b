"""Recurring jobs: choose the batch size and power limit of a training job that runs again and again.

- `spec`: `JobSpec` (the job and its knobs), `StoredRun`, `Recommendation`.
- `policy` and `bandit`: the pure decisions (pruning exploration, Thompson sampling, early stopping).
- `optimizer`: `BatchSizeOptimizer`, the decisions bound to a store and a clock.
- `job_run`: `RecurringJobRun`, the recurring-job part of a `wattwise.run.Run`, which both adapters drive.
- `trace` and `simulator`: the same optimizer driven by Zeus's real GPU traces.
- `summary`: a job's history in a few numbers (for `wattwise jobs`).

The history lives in `wattwise.store` (its interface `JobStore`, `open_store`, `MemoryJobStore`), which
imports `spec` from here. So that importing the store never runs the optimizer (and the optimizer, which
needs the store, never finds it half imported), this package holds only the pure `spec` and `policy`;
`BatchSizeOptimizer` is imported from `wattwise.recurring.optimizer`, the store from `wattwise.store`.
"""

from __future__ import annotations

from wattwise.recurring.policy import WATTWISE_POLICY, ZEUS_POLICY, PolicyConfig
from wattwise.recurring.spec import JobSpec, Recommendation, StoredRun

__all__ = [
    "WATTWISE_POLICY",
    "ZEUS_POLICY",
    "JobSpec",
    "PolicyConfig",
    "Recommendation",
    "StoredRun",
]
