"""Where wattwise keeps history: recurring jobs, their runs, and remembered power limits.

- `base`: `JobStore`, the interface every store implements, and the errors they raise alike.
- `factory`: which store (`open_store`, `default_store_url`, `store_url`, `STORE_ENV`): a SQLite file
  in the state directory by default, `$WATTWISE_STORE` or a location given, PostgreSQL by URL.
- `memory`: `MemoryJobStore`, nothing outlives the process (simulator, tests).
- `sql`: `SqlJobStore` on SQLAlchemy (SQLite or PostgreSQL), with `read`/`write` for other tables.
- `schema`: the tables, defined once; `migrations`: their Alembic revisions, applied on opening.
- `spool`: results kept on disk while the store is unreachable (`StoreUnavailable`).
- `limits_memory`: power-limit tuning's remembered choices (`LimitsMemory`), in the same database.
- `runs`: the run history, one `RunRow` per training run (`record_run`, `list_runs`, `get_run`,
  `forget_run`), what `wattwise runs` and the dashboard read.

Importing this package (or `base`, `factory`, `memory`, `spool`, `limits_memory`, `runs`) does not import
SQLAlchemy or Alembic: a run that never opens a store never loads them.
"""

from wattwise.store.base import JobStore
from wattwise.store.factory import STORE_ENV, default_store_url, open_store, store_url
from wattwise.store.memory import MemoryJobStore

__all__ = ["STORE_ENV", "JobStore", "MemoryJobStore", "default_store_url", "open_store", "store_url"]
