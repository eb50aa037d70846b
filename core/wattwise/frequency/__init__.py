"""Measuring and applying GPU SM frequencies on a pipeline stage, through the device layer and the settings guard.

`profiler` measures a pipeline profile (each stage's forward and backward at each frequency), and `controller` follows a
plan, locking the clock before each instruction. The planning between the two is `wattwise.pipeline`'s (pure).
"""
