"""The run's record: summary.json, the run's files, reports and plots (read and written by `wattwise.codec`).

`summary` (summary.json), `files` (windows.csv, power.csv, a run folder), `report`
(reports and statements), `plot` (pictures of a run).
"""
