"""The store's tables, defined once: recurring jobs, their runs, remembered power limits, and the run history.

This is the current schema. The Alembic revisions in `wattwise.store.migrations` build it step by
step from an empty database (or from a store made by wattwise 0.1.0), each with its own frozen table
definitions; a test checks that upgrading an empty database yields exactly these tables. Changing a
table here therefore needs a new revision.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Double, ForeignKey, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

#: A recurring job's settings (`JobSpec`); `batch_sizes` is a JSON list.
jobs_table = Table(
    "wattwise_jobs",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("batch_sizes", Text, nullable=False),
    Column("default_batch_size", Integer, nullable=False),
    Column("target_metric", Double, nullable=False),
    Column("metric_mode", String(3), nullable=False),
    Column("max_epochs", Integer, nullable=False),
    Column("max_power_w", Double, nullable=False),
    Column("eta", Double, nullable=False),
    Column("beta", Double, nullable=False),
    Column("created_at_s", Double, nullable=False),
)

#: Every run of a recurring job (`StoredRun`); a NULL `cost_limit` means no limit.
runs_table = Table(
    "wattwise_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_name", String(128), ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), nullable=False),
    Column("batch_size", Integer, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("state", String(16), nullable=False),
    Column("power_limit_w", Double, nullable=True),
    Column("cost_limit", Double, nullable=True),
    Column("epochs", Integer, nullable=False),
    Column("energy_j", Double, nullable=True),
    Column("time_s", Double, nullable=True),
    Column("cost", Double, nullable=True),
    Column("started_at_s", Double, nullable=False),
    Column("updated_at_s", Double, nullable=False),
    Index("ix_wattwise_runs_job_name_id", "job_name", "id"),
)

#: The power limit a recurring job uses at each batch size (what its batch-size optimizer reads).
limits_table = Table(
    "wattwise_power_limits",
    metadata,
    Column("job_name", String(128), ForeignKey("wattwise_jobs.name", ondelete="CASCADE"), primary_key=True),
    Column("batch_size", Integer, primary_key=True),
    Column("power_limit_w", Double, nullable=False),
)

#: A tuning run's result, reused by the next run with the same key (`wattwise.store.limits_memory.memory_key`:
#: job, GPU model and count, batch size): the chosen limit with its step time and energy, the whole
#: profile (a JSON list of {power_limit_w, time_s, energy_j}), and the selector, eta, time and run
#: that chose it (NULL when unknown, as for limits imported from an old JSON file).
remembered_limits_table = Table(
    "wattwise_remembered_limits",
    metadata,
    Column("memory_key", Text, primary_key=True),
    Column("power_limit_w", Double, nullable=False),
    Column("time_s", Double, nullable=False),
    Column("energy_j", Double, nullable=False),
    Column("profile", Text, nullable=False),
    Column("selector", String(32), nullable=True),
    Column("eta", Double, nullable=True),
    Column("chosen_at_s", Double, nullable=True),
    Column("run_id", String(256), nullable=True),
)

#: A tuning that could not profile every limit in its run, under the same key as a remembered limit: the
#: tuner's state (JSON), how many limits it profiled of how many, when and by which run. The next run of the
#: job goes on from there (`wattwise.store.limits_memory.LimitsMemory.recall_progress`).
tuning_progress_table = Table(
    "wattwise_tuning_progress",
    metadata,
    Column("memory_key", Text, primary_key=True),
    Column("state", Text, nullable=False),
    Column("profiled", Integer, nullable=False),
    Column("limits", Integer, nullable=False),
    Column("updated_at_s", Double, nullable=False),
    Column("run_id", String(256), nullable=True),
)

#: Every training run wattwise measured (`wattwise.store.runs.RunRow`), recurring or not: what `wattwise runs`
#: and the dashboard read. `id` is the run's own folder name; times are unix seconds; `devices` a JSON list;
#: the `payback_` columns are the run's one saving (`wattwise.store.history.RunPayback`), NULL before 0008.
run_history_table = Table(
    "wattwise_run_history",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("job", String(128), nullable=True),
    Column("framework", String(32), nullable=True),
    Column("mode", String(16), nullable=False),
    Column("status", String(32), nullable=True),
    Column("start_s", Double, nullable=False),
    Column("end_s", Double, nullable=False),
    Column("devices", Text, nullable=False),
    Column("time_s", Double, nullable=False),
    Column("energy_j", Double, nullable=False),
    Column("energy_uncertainty_j", Double, nullable=True),
    Column("power_limit_w", Double, nullable=True),
    Column("saving_j", Double, nullable=True),
    Column("time_cost_s", Double, nullable=True),
    Column("folder", Text, nullable=False),
    Column("simulated", Boolean, nullable=False),
    Column("owner", String(128), nullable=True),
    Column("saving_uncertainty_j", Double, nullable=True),
    Column("project", String(128), nullable=True),
    Column("payback_run_energy_saved_j", Double, nullable=True),
    Column("payback_run_energy_saved_uncertainty_j", Double, nullable=True),
    Column("payback_run_time_added_s", Double, nullable=True),
    Column("payback_break_even_steps", Integer, nullable=True),
    Column("payback_paid_back", Boolean, nullable=True),
    Index("ix_wattwise_run_history_start_s", "start_s"),
    Index("ix_wattwise_run_history_job_start_s", "job", "start_s"),
)

#: wattwise 0.1.0's own schema version (1). Kept, at 1, so that 0.1.0 still opens a store that only
#: grew since; a revision that 0.1.0 could not work with raises it, and 0.1.0 then refuses the store.
legacy_version_table = Table(
    "wattwise_schema_version",
    metadata,
    Column("version", Integer, nullable=False),
)
