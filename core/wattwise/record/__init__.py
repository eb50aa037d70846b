"""The run's record: summary.json, its fields' codec, the run's files, reports and plots.

`summary` (summary.json), `fields` (its codec), `files` (windows.csv, power.csv, a run folder), `report`
(reports and statements), `plot` (pictures of a run).
"""
