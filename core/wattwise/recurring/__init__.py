"""Recurring jobs: choose the batch size and power limit of a training job that runs again and again.

- `spec`: `JobSpec` (the job and its knobs), `RunRecord`, `Recommendation`.
- `policy` and `bandit`: the pure decisions (pruning exploration, Thompson sampling, early stopping).
- `optimizer`: `BatchSizeOptimizer`, the decisions bound to a store and a clock.
- `job_run`: `RecurringJobRun`, the recurring-job part of a `wattwise.run.Run`, which both adapters drive.
- `trace` and `simulator`: the same optimizer driven by Zeus's real GPU traces.
- `summary`: a job's history in a few numbers (for `wattwise jobs`).

The history lives in `wattwise.store` (its interface `JobStore`, `open_store`, `MemoryJobStore`), which
imports `spec` from here. So that importing the store never runs the optimizer (and the optimizer, which
needs the store, never finds it half imported), this package imports only the pure `spec` and `policy`
when imported; `BatchSizeOptimizer` and the store names kept here for existing callers load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from wattwise.recurring.policy import WATTWISE_POLICY, ZEUS_POLICY, PolicyConfig
from wattwise.recurring.spec import JobSpec, Recommendation, RunRecord

if TYPE_CHECKING:
    from wattwise.recurring.optimizer import BatchSizeOptimizer
    from wattwise.store import JobStore, MemoryJobStore, default_store_url, open_store

#: Names loaded on first use, and the module each comes from.
_LAZY = {
    "BatchSizeOptimizer": "wattwise.recurring.optimizer",
    "JobStore": "wattwise.store",
    "MemoryJobStore": "wattwise.store",
    "default_store_url": "wattwise.store",
    "open_store": "wattwise.store",
}


def __getattr__(name: str) -> Any:
    """Load `BatchSizeOptimizer` and the store's names on first use (PEP 562).

    Raises:
        AttributeError: `name` is not one of them.
    """
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


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
