"""Pipeline frequency planning (Perseus, SOSP'24): profiles, schedules, the DAG, the time-energy frontier
(fast solver and CP-SAT yardstick), plans and their files. Pure decision code: no clock, no device."""
