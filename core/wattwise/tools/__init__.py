"""Tools that are not library code.

The acceptance checks, the demo, example data and the emulated workload (which imports torch).
"""
