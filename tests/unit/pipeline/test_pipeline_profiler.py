"""The PipelineProfiler on simulated GPUs (virtual clock): what it measures, that clocks are restored."""

from __future__ import annotations

import pytest

from tests.support.clock import VirtualClock
from wattwise.devices import Physics, SimulatedGPU
from wattwise.errors import UsageError
from wattwise.frequency.profiler import PipelineProfiler, StageWork
from wattwise.pipeline.dag import pipeline_dag
from wattwise.pipeline.frontier import FrontierSolver
from wattwise.pipeline.plan import assemble_frontier, choose_intrinsic
from wattwise.pipeline.problem import PlanningProblem
from wattwise.settings.guard import SettingsGuard

FORWARD_S, BACKWARD_S = 0.010, 0.020


def simulated_stages(tmp_path, count: int) -> list[StageWork]:
    clock = VirtualClock(start=0.0)
    stages = []
    for index in range(count):
        gpu = SimulatedGPU(index, state_file=tmp_path / f"gpu{index}.json", clock=clock, sleep=clock.sleep)
        # The last stage does a bit more work, as the loss layer does.
        scale = 1.3 if index == count - 1 else 1.0
        stages.append(
            StageWork(
                gpu,
                forward=lambda gpu=gpu, s=scale: gpu.run_step(base_time_s=FORWARD_S * s),
                backward=lambda gpu=gpu, s=scale: gpu.run_step(base_time_s=BACKWARD_S * s),
            )
        )
    return stages


def test_profile_follows_the_gpu_clock_model_and_clocks_are_reset(tmp_path):
    stages = simulated_stages(tmp_path, 2)
    freqs = [1740, 1500, 1200, 900]
    with SettingsGuard(tmp_path / "journal") as guard:
        profile = PipelineProfiler(stages, guard, frequencies_mhz=freqs, iterations=3).measure()
    assert profile.num_stages == 2 and "simulated" in profile.source
    gpu = stages[0].device
    assert isinstance(gpu, SimulatedGPU)
    for m in profile.options(0, "backward"):
        time_factor, busy_w = gpu.model.operating_point(gpu.power_limit_w(), m.frequency_mhz)
        assert m.time_s == pytest.approx(BACKWARD_S * time_factor, rel=1e-9)
        assert m.energy_j == pytest.approx(m.time_s * busy_w, rel=1e-9)
    times = [m.time_s for m in profile.options(1, "forward")]
    assert times == sorted(times)  # highest frequency first, so fastest first
    assert all(stage.device.locked_sm_clocks_mhz() is None for stage in stages)


def test_a_measured_profile_plans_a_cheaper_iteration(tmp_path):
    stages = simulated_stages(tmp_path, 3)
    with SettingsGuard(tmp_path / "journal") as guard:
        profile = PipelineProfiler(
            stages, guard, frequencies_mhz=[1740, 1440, 1140, 840], iterations=1, warmup=0
        ).measure()
    problem = PlanningProblem.build(profile, pipeline_dag("1f1b", 3, 4), p_blocking_w=60.0)
    frontier = assemble_frontier(problem, list(FrontierSolver(problem, 0.001).run()), unit_time_s=0.001, solver="fast")
    assert choose_intrinsic(frontier).saving > 0.0


def test_clocks_are_reset_when_an_instruction_fails(tmp_path):
    stages = simulated_stages(tmp_path, 1)

    def broken() -> None:
        raise RuntimeError("out of memory")

    failing = [StageWork(stages[0].device, forward=stages[0].forward, backward=broken)]
    with SettingsGuard(tmp_path / "journal") as guard, pytest.raises(RuntimeError, match="out of memory"):
        PipelineProfiler(failing, guard, frequencies_mhz=[1740, 900]).measure()
    assert stages[0].device.locked_sm_clocks_mhz() is None


def test_unsupported_frequencies_and_bad_counts_are_named(tmp_path):
    stages = simulated_stages(tmp_path, 1)
    guard = SettingsGuard(tmp_path / "journal")
    with pytest.raises(UsageError, match=r"gpu0 does not support SM clocks \[1741\] MHz"):
        PipelineProfiler(stages, guard, frequencies_mhz=[1740, 1741])
    with pytest.raises(UsageError, match="iterations must be a positive integer"):
        PipelineProfiler(stages, guard, iterations=0)
    with pytest.raises(UsageError, match="at least two frequencies"):
        PipelineProfiler(stages, guard, frequencies_mhz=[1740])


def realistic_stages(tmp_path, physics: Physics, forward_s: float = 0.002, backward_s: float = 0.004):
    clock = VirtualClock(start=0.0)
    stages = []
    for index in range(2):
        gpu = SimulatedGPU(
            index, state_file=tmp_path / f"gpu{index}.json", clock=clock, sleep=clock.sleep, physics=physics
        )
        scale = 1.3 if index == 1 else 1.0
        stages.append(
            StageWork(
                gpu,
                forward=lambda gpu=gpu, s=scale: gpu.run_step(base_time_s=forward_s * s),
                backward=lambda gpu=gpu, s=scale: gpu.run_step(base_time_s=backward_s * s),
            )
        )
    return stages, clock


def test_on_a_coarse_counter_each_measurement_spans_20_updates_and_2_to_6_ms_instructions_come_out_within_3_percent(
    tmp_path,
):
    stages, clock = realistic_stages(tmp_path, Physics.realistic(seed=5))
    freqs = [1740, 1440, 1140, 840]
    with SettingsGuard(tmp_path / "journal") as guard:
        profiler = PipelineProfiler(stages, guard, frequencies_mhz=freqs)
        assert profiler.window_s == pytest.approx(20 * 0.100)
        assert profiler.estimated_s() == pytest.approx(2 * 4 * 2 * 20 * 0.100 + 2 * 3 * profiler.LATENCY_WINDOW_S)
        started = clock()
        profile = profiler.measure()
    assert clock() - started >= profiler.estimated_s()
    for index, stage in enumerate(stages):
        gpu = stage.device
        assert isinstance(gpu, SimulatedGPU)
        scale = 1.3 if index == 1 else 1.0
        for instruction, base_s in (("forward", 0.002 * scale), ("backward", 0.004 * scale)):
            for m in profile.options(index, instruction):
                factor, busy_w = gpu.model.operating_point(gpu.model.limit_range_w[1], m.frequency_mhz)
                idle = gpu.model.idle_power_w
                true_w = idle + (busy_w - idle) * gpu.efficiency  # this GPU's own efficiency
                assert m.time_s == pytest.approx(base_s * factor, rel=0.03)
                assert m.energy_j == pytest.approx(base_s * factor * true_w, rel=0.03)


def test_max_profile_s_bounds_how_long_profiling_takes(tmp_path):
    stages, clock = realistic_stages(tmp_path, Physics.realistic(seed=5))
    with SettingsGuard(tmp_path / "journal") as guard:
        profiler = PipelineProfiler(stages, guard, frequencies_mhz=[1740, 840], max_profile_s=4.0)
        assert profiler.estimated_s() == pytest.approx(4.0)
        started = clock()
        profiler.measure()
    assert clock() - started < 4.0 + 8 * 0.3  # plus warm-up and one counter period per end at most
    with pytest.raises(UsageError, match="max_profile_s must be a number of seconds >= 0"):
        PipelineProfiler(stages, SettingsGuard(tmp_path / "journal"), max_profile_s=-1.0)


def test_the_profile_records_how_long_a_clock_change_takes_to_act(tmp_path):
    from tests.support.clock import VirtualClock
    from wattwise.frequency.profiler import clock_change_s

    clock = VirtualClock()
    realistic = SimulatedGPU(0, clock=clock, sleep=clock.sleep, physics=Physics.realistic(seed=3))
    ideal = SimulatedGPU(1, clock=clock, sleep=clock.sleep, physics=Physics.ideal())
    with SettingsGuard(tmp_path / "journal") as guard:
        # The H100 preset's clock call takes 2 ms, then settles with a 10 ms time constant: within 5% of
        # the new speed about 32 ms after the call; 5 ms instructions see it to half of one.
        latency_s = clock_change_s(realistic, lambda: realistic.run_step(base_time_s=0.005), guard, (1980, 990))
        assert 0.02 <= latency_s <= 0.045
        assert clock_change_s(ideal, lambda: ideal.run_step(base_time_s=0.005), guard, (1740, 840)) == 0.0
    stages, _ = realistic_stages(tmp_path / "stages", Physics.realistic(seed=5))
    with SettingsGuard(tmp_path / "journal2") as guard:
        profile = PipelineProfiler(stages, guard, frequencies_mhz=[1740, 840]).measure()
    assert set(profile.clock_change_s) == {0, 1} and all(v > 0 for v in profile.clock_change_s.values())
