"""Facility and carbon awareness: PUE, grid carbon intensity and price over time (pure decisions).

Each module is imported by its own name: the record reads `series` and `integrate` without the decisions
of `advisor` and `policy`.

- `series`: the inputs, constants or `timestamp,value` CSV step series, validated.
- `grid`: the bundled table of yearly average grid carbon intensity by country and cloud region.
- `integrate`: facility energy, emissions and cost of energy spread over time.
- `advisor`: the start time within a window that minimises emissions, facility energy or cost.
- `policy`: the carbon-aware power limit (time-optimal when the grid is clean, energy-optimal when not).
- `example`: a run directory in the run record's format (`wattwise.record.summary`), for tests and the README.
"""
