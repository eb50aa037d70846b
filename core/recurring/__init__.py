"""Recurring jobs: choose the batch size and power limit of a training job that runs again and again.

- `spec`: `JobSpec` (the job and its knobs), `RunRecord`, `Recommendation`.
- `policy` and `bandit`: the pure decisions (pruning exploration, Thompson sampling, early stopping).
- `optimizer`: `BatchSizeOptimizer`, what a training integration calls.
- `store`, `sql_store`, `migrations`: where the history lives (SQLite file by default, PostgreSQL by URL).
- `trace` and `simulator`: the same optimizer driven by Zeus's real GPU traces.
- `summary`: a job's history in a few numbers (for `wattwise jobs`).
"""

from wattwise.recurring.optimizer import BatchSizeOptimizer
from wattwise.recurring.policy import WATTWISE_POLICY, ZEUS_POLICY, PolicyConfig
from wattwise.recurring.spec import JobSpec, Recommendation, RunRecord
from wattwise.recurring.store import JobStore, MemoryJobStore, default_store_url, open_store

__all__ = [
    "WATTWISE_POLICY",
    "ZEUS_POLICY",
    "BatchSizeOptimizer",
    "JobSpec",
    "JobStore",
    "MemoryJobStore",
    "PolicyConfig",
    "Recommendation",
    "RunRecord",
    "default_store_url",
    "open_store",
]
