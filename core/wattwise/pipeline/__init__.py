"""Pipeline frequency planning (Perseus, SOSP'24).

Profiles, schedules, the DAG, the time-energy frontier (fast solver and CP-SAT yardstick), plans, their files and plots.
Pure decision code: no clock, no device. Measuring a profile and applying a plan on GPUs is `wattwise.frequency`'s.
"""
