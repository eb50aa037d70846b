"""The dashboard: a local, read-only web page over the run history (`wattwise dashboard`).

An entry point beside `wattwise.cli`: it reads the run record (`wattwise.record`), the store
(`wattwise.store`) and the pipeline planner's files, and never touches a device. Its parts:

- `charts`: Plotly figures of a run (power and limit over time, the tuning profile), a comparison of runs,
  a recurring job and a pipeline frontier with its plan; every chart of simulated figures says so;
- `history`: where the runs come from (the store's run history, or the run folders under a directory);
- `pages`: the HTML pages (Jinja2 templates), also written as one self-contained file by
  `wattwise report RUN --html FILE`;
- `server`: the aiohttp application that serves the pages on 127.0.0.1.

Plotly, aiohttp and Jinja2 come with the `dashboard` extra.
"""
