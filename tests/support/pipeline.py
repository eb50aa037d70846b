"""Shared builders for the pipeline tests (no tests here): small profiles, real-profile subsets, problems."""

from __future__ import annotations

import math
import shutil
import sysconfig
from pathlib import Path

import numpy as np

from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.problem import PlanningProblem
from wattwise.pipeline.profiles import FrequencyOption, PipelineProfile, load_profile
from wattwise.pipeline.schedule import INSTRUCTIONS

GPT3_A100 = "perseus/stage_profile/gpt3-175b+a100_sxm_bf16.csv"
BLOOM_A40 = "perseus/stage_profile/bloom+a40_bf16.csv"


def can_build_extensions() -> bool:
    """A C compiler and this Python's headers: what the optional C extension needs to be built."""
    include = sysconfig.get_paths().get("include")
    return bool((shutil.which("cc") or shutil.which("gcc")) and include and (Path(include) / "Python.h").exists())


def synthetic_profile(
    stages: int, frequencies: int, unit_s: float, seed: int, units: tuple[float, float] = (100.0, 200.0)
) -> PipelineProfile:
    """A GPU-like profile: time ~ memory-bound share + compute share / f, busy power ~ idle + k f^2.

    Times are whole multiples of `unit_s` (about `units` of them for forward and backward at the
    highest frequency), so quantising them loses nothing.
    """
    rng = np.random.default_rng(seed)
    freqs = np.linspace(1410, 810, frequencies).round().astype(int)
    measurements = {}
    for stage in range(stages):
        for instruction, base_units in zip(INSTRUCTIONS, units, strict=True):
            t_max_units = base_units * rng.uniform(0.8, 1.2)
            memory = rng.uniform(0.1, 0.4)
            options = []
            for f in freqs:
                count = math.ceil(t_max_units * (memory + (1 - memory) * 1410 / f))
                power_w = 90 + 310 * (f / 1410) ** 2
                options.append(FrequencyOption(int(f), count * unit_s, power_w * count * unit_s))
            measurements[(stage, instruction)] = tuple(options)
    return PipelineProfile(measurements)


def real_subset(shared_data: Path, name: str, stages: list[int], frequencies: int, unit_s: float) -> PipelineProfile:
    """Some stages and evenly spaced frequencies of a real Perseus profile, times rounded up to `unit_s`."""
    profile = load_profile(shared_data / name)
    measurements = {}
    for new, stage in enumerate(stages):
        for instruction in INSTRUCTIONS:
            options = profile.options(stage, instruction)
            picked = np.unique(np.linspace(0, len(options) - 1, frequencies).round().astype(int))
            measurements[(new, instruction)] = tuple(
                FrequencyOption(
                    options[i].frequency_mhz, math.ceil(options[i].time_s / unit_s - 1e-9) * unit_s, options[i].energy_j
                )
                for i in picked
            )
    return PipelineProfile(measurements)


def problem_for(profile: PipelineProfile, schedule: str, microbatches: int, p_blocking_w: float) -> PlanningProblem:
    return PlanningProblem.build(profile, pipeline_dag(schedule, profile.num_stages, microbatches), p_blocking_w)
