"""Recurring jobs: choose the batch size and power limit of a training job that runs again and again.

- `spec`: `JobSpec` (the job and its knobs), `RunRecord`, `Recommendation`.
- `policy` and `bandit`: the pure decisions (pruning exploration, Thompson sampling, early stopping).
- `optimizer`: `BatchSizeOptimizer`, the decisions bound to a store and a clock.
- `job_run`: `RecurringJobRun`, the recurring-job part of a `wattwise.run.Run`, which both adapters drive.
- `store`: the `JobStore` interface, `MemoryJobStore` and `open_store` (which store: a SQLite file by
  default, `$WATTWISE_STORE`, or PostgreSQL by URL).
- `sql_store`: `SqlJobStore`, the store on SQLAlchemy (jobs, runs and remembered power limits).
- `schema`: the store's tables, defined once.
- `migrations`: the schema's Alembic revisions (`migrations/versions/`), applied when a store is opened.
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
