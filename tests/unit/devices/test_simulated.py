"""The simulated GPU: its energy is the integral of the modelled power, settings persist like a GPU's.

Every figure runs on a virtual clock (`FakeClock`, whose `advance` doubles as `sleep`), so the checks are
exact on a loaded machine. Expected values are worked out by hand from small power models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import wattwise.devices
from tests.support.fake_pynvml import FakeClock
from wattwise.devices.simulated import ClockModel, PowerModel, SimulatedGPU
from wattwise.errors import EnergyPluginWarning, UsageError

#: A model small enough to check by hand: limits 100/200/300 W, relative step time 2.0/1.2/1.0,
#: busy power 90/170/240 W, idle 50 W. Halfway between 200 and 300 W: time 1.1, power 205 W.
HAND = PowerModel(
    power_limits_w=(100.0, 200.0, 300.0),
    time_factors=(2.0, 1.2, 1.0),
    busy_power_w=(90.0, 170.0, 240.0),
    idle_power_w=50.0,
    clock=ClockModel(max_mhz=1800, min_mhz=300, step_mhz=100, memory_bound_fraction=0.25, power_exponent=2.0),
)


pytestmark = pytest.mark.usefixtures("simulated_home")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def gpu_on(clock: FakeClock, model: PowerModel = HAND, **kwargs: object) -> SimulatedGPU:
    return SimulatedGPU(0, model, clock=clock, sleep=clock.advance, **kwargs)  # type: ignore[arg-type]


def energy_over(gpu: SimulatedGPU, action: object) -> float:
    before = gpu.energy_j()
    action()  # type: ignore[operator]
    return gpu.energy_j() - before


# -- physics ------------------------------------------------------------------------------------------


def test_idle_energy_is_idle_power_times_time(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    joules = energy_over(gpu, lambda: clock.advance(12.5))
    assert joules == pytest.approx(50.0 * 12.5, rel=0.02)


def test_busy_energy_is_the_busy_power_at_the_current_limit(clock: FakeClock) -> None:
    gpu = gpu_on(clock)

    def work() -> None:
        with gpu.busy():
            clock.advance(4.0)

    assert gpu.power_limit_w() == 300.0
    assert energy_over(gpu, work) == pytest.approx(240.0 * 4.0, rel=0.02)


def test_power_between_table_rows_is_interpolated_linearly(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    gpu.set_power_limit_w(250.0)  # halfway between 200 W (170 W busy) and 300 W (240 W busy)
    with gpu.busy():
        assert gpu.power_w() == pytest.approx(205.0)
        joules = energy_over(gpu, lambda: clock.advance(2.0))
    assert joules == pytest.approx(205.0 * 2.0, rel=0.02)


def test_run_step_lasts_the_modelled_time_and_costs_busy_power_over_it(clock: FakeClock) -> None:
    gpu = gpu_on(clock, base_step_time_s=0.5)
    gpu.set_power_limit_w(200.0)
    durations: list[float] = []
    joules = energy_over(gpu, lambda: durations.append(gpu.run_step()))
    assert durations == [pytest.approx(0.5 * 1.2)]
    assert joules == pytest.approx(170.0 * 0.5 * 1.2, rel=0.02)


def test_run_step_counts_the_real_work_inside_the_modelled_time(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    took = gpu.run_step(lambda: clock.advance(0.3), base_time_s=1.0)  # work 0.3 s, then sleeps 0.7 s
    assert took == pytest.approx(1.0)
    assert gpu.energy_j() == pytest.approx(240.0 * 1.0, rel=0.02)


def test_idle_and_busy_phases_add_up(clock: FakeClock) -> None:
    gpu = gpu_on(clock, base_step_time_s=1.0)

    def session() -> None:
        clock.advance(3.0)  # idle 3 s at 50 W
        for _ in range(4):
            gpu.run_step()  # 4 steps of 1.0 s at 240 W
            clock.advance(0.5)  # 0.5 s idle between steps

    expected = 50.0 * 3.0 + 4 * (240.0 * 1.0 + 50.0 * 0.5)
    assert energy_over(gpu, session) == pytest.approx(expected, rel=0.02)


def test_changing_the_limit_mid_way_changes_the_power_from_then_on(clock: FakeClock) -> None:
    gpu = gpu_on(clock)

    def work() -> None:
        with gpu.busy():
            clock.advance(2.0)  # 2 s at 300 W limit: 240 W
            gpu.set_power_limit_w(100.0)
            clock.advance(3.0)  # 3 s at 100 W limit: 90 W

    assert energy_over(gpu, work) == pytest.approx(240.0 * 2.0 + 90.0 * 3.0, rel=0.02)


def test_a_lower_limit_makes_steps_slower(clock: FakeClock) -> None:
    gpu = gpu_on(clock, base_step_time_s=0.1)
    full = gpu.run_step()
    gpu.set_power_limit_w(100.0)
    capped = gpu.run_step()
    assert capped / full == pytest.approx(2.0)


def test_locked_clock_slows_steps_and_lowers_power_per_the_clock_model(clock: FakeClock) -> None:
    gpu = gpu_on(clock, base_step_time_s=1.0)
    gpu.lock_sm_clocks_mhz(900, 900)  # half of 1800 MHz
    # Time: memory-bound quarter unchanged, compute-bound 3/4 twice as long -> 0.25 + 0.75 * 2 = 1.75.
    # Power: idle 50 W + (240 - 50) W * (1/2)^2 = 97.5 W.
    durations: list[float] = []
    joules = energy_over(gpu, lambda: durations.append(gpu.run_step()))
    assert durations == [pytest.approx(1.75)]
    assert joules == pytest.approx(97.5 * 1.75, rel=0.02)


def test_with_a_limit_and_a_locked_clock_the_slower_time_and_lower_power_win(clock: FakeClock) -> None:
    gpu = gpu_on(clock, base_step_time_s=1.0)
    gpu.set_power_limit_w(100.0)  # time 2.0, power 90 W
    gpu.lock_sm_clocks_mhz(900, 900)  # time 1.75, power 97.5 W
    durations: list[float] = []
    joules = energy_over(gpu, lambda: durations.append(gpu.run_step()))
    assert durations == [pytest.approx(2.0)]
    assert joules == pytest.approx(90.0 * 2.0, rel=0.02)
    gpu.reset_sm_clocks()
    gpu.set_power_limit_w(300.0)
    assert gpu.run_step() == pytest.approx(1.0)


def test_energy_counter_never_goes_backwards(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    readings = []
    for _ in range(5):
        with gpu.busy():
            clock.advance(0.1)
        readings.append(gpu.energy_j())
    assert readings == sorted(readings)
    assert readings[0] > 0


def test_an_idle_gpu_is_not_driven_whatever_its_settings(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    gpu.set_power_limit_w(200.0)
    gpu.lock_sm_clocks_mhz(900, 900)
    clock.advance(5.0)
    assert gpu.energy_j() > 0  # idle power, counted, but no emulated work drew it
    assert gpu.driven is False


@pytest.mark.parametrize("work", ["run_step", "busy"])
def test_emulated_work_drives_the_gpu_for_good(clock: FakeClock, work: str) -> None:
    gpu = gpu_on(clock)
    if work == "run_step":
        gpu.run_step()
    else:
        with gpu.busy():
            clock.advance(0.1)
    clock.advance(10.0)  # idle again afterwards: still a GPU that ran emulated work in this process
    assert gpu.driven is True


def test_driven_is_read_only(clock: FakeClock) -> None:
    gpu = gpu_on(clock)
    with pytest.raises(AttributeError):
        gpu.driven = True  # type: ignore[misc]


def test_supported_clocks_are_listed_highest_first() -> None:
    clocks = HAND.clock.supported_mhz()
    assert clocks[0] == 1800 and clocks[-1] == 300
    assert clocks == sorted(clocks, reverse=True)
    assert len(clocks) == (1800 - 300) // 100 + 1


# -- limits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("watts", [99.9, 300.1, 0.0, -5.0])
def test_a_limit_outside_the_range_is_refused_and_names_the_range(clock: FakeClock, watts: float) -> None:
    gpu = gpu_on(clock)
    with pytest.raises(UsageError, match=r"\[100\.0, 300\.0\]"):
        gpu.set_power_limit_w(watts)
    assert gpu.power_limit_w() == 300.0


@pytest.mark.parametrize("watts", [100.0, 300.0])
def test_the_ends_of_the_range_are_allowed(clock: FakeClock, watts: float) -> None:
    gpu = gpu_on(clock)
    gpu.set_power_limit_w(watts)
    assert gpu.power_limit_w() == watts


def test_explicit_min_and_max_limits_narrow_the_range(clock: FakeClock) -> None:
    model = PowerModel(HAND.power_limits_w, HAND.time_factors, HAND.busy_power_w, min_limit_w=150.0, max_limit_w=250.0)
    gpu = gpu_on(clock, model)
    rng = gpu.power_limit_range()
    assert (rng.min_w, rng.max_w, rng.default_w) == (150.0, 250.0, 250.0)
    assert gpu.power_limit_w() == 250.0
    with pytest.raises(UsageError):
        gpu.set_power_limit_w(120.0)


@pytest.mark.parametrize(("lo", "hi"), [(200, 2000), (100, 900), (1000, 900)])
def test_a_clock_range_outside_the_supported_one_is_refused(clock: FakeClock, lo: int, hi: int) -> None:
    gpu = gpu_on(clock)
    with pytest.raises(UsageError, match="SM clock range"):
        gpu.lock_sm_clocks_mhz(lo, hi)
    assert gpu.locked_sm_clocks_mhz() is None


# -- persistence --------------------------------------------------------------------------------------


def test_a_second_gpu_on_the_same_state_file_sees_the_changed_settings(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "gpu0.json"
    first = gpu_on(clock, state_file=state)
    first.set_power_limit_w(150.0)
    first.lock_sm_clocks_mhz(600, 1200)
    # What the next process finds after this one crashed without restoring.
    second = gpu_on(clock, state_file=state)
    assert second.power_limit_w() == 150.0
    assert second.locked_sm_clocks_mhz() == (600, 1200)
    assert json.loads(state.read_text())["power_limit_w"] == 150.0


def test_resetting_clocks_is_persisted_too(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "gpu0.json"
    gpu = gpu_on(clock, state_file=state)
    gpu.lock_sm_clocks_mhz(600, 1200)
    gpu.reset_sm_clocks()
    assert gpu_on(clock, state_file=state).locked_sm_clocks_mhz() is None


def test_without_a_state_file_a_new_gpu_starts_at_the_maximum_limit(clock: FakeClock) -> None:
    gpu_on(clock).set_power_limit_w(150.0)
    assert gpu_on(clock).power_limit_w() == 300.0


def test_a_torn_state_file_falls_back_to_the_defaults(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "gpu0.json"
    state.write_text('{"power_limit_w": 15')
    with pytest.warns(EnergyPluginWarning, match="holds no settings of a simulated GPU: not JSON"):
        gpu = gpu_on(clock, state_file=state)
    assert gpu.power_limit_w() == 300.0
    assert gpu.locked_sm_clocks_mhz() is None


def test_a_missing_state_folder_is_created_on_the_first_change(clock: FakeClock, tmp_path: Path) -> None:
    state = tmp_path / "deep" / "er" / "gpu0.json"
    gpu_on(clock, state_file=state).set_power_limit_w(200.0)
    assert json.loads(state.read_text())["power_limit_w"] == 200.0


# -- power model CSV ----------------------------------------------------------------------------------


def write_csv(tmp_path: Path, text: str, name: str = "model.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_csv_model_is_read_and_sorted_by_limit(tmp_path: Path, clock: FakeClock) -> None:
    path = write_csv(tmp_path, "power_limit,time,power,comment\n300,1.0,240,top\n100,2.0,90,\n200,1.2,170,\n")
    model = PowerModel.from_csv(path, idle_power_w=50.0)
    assert model.power_limits_w == (100.0, 200.0, 300.0)
    assert model.time_factors == (2.0, 1.2, 1.0)
    assert model.busy_power_w == (90.0, 170.0, 240.0)
    assert "model.csv" in model.name
    gpu = gpu_on(clock, model)
    gpu.set_power_limit_w(250.0)
    with gpu.busy():
        assert gpu.power_w() == pytest.approx(205.0)


def test_a_missing_csv_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"nowhere\.csv"):
        PowerModel.from_csv(tmp_path / "nowhere.csv")


@pytest.mark.parametrize("text", ["power_limit,time\n100,2.0\n", "limit,time,power\n100,2.0,90\n", ""])
def test_missing_columns_name_the_file_and_the_columns_needed(tmp_path: Path, text: str) -> None:
    path = write_csv(tmp_path, text, "cols.csv")
    with pytest.raises(UsageError, match=r"cols\.csv.*power_limit,time,power"):
        PowerModel.from_csv(path)


@pytest.mark.parametrize("bad_row", ["200,fast,170", "200,1.2,", "200,1.2"])
def test_a_non_number_names_the_file_and_the_line(tmp_path: Path, bad_row: str) -> None:
    path = write_csv(tmp_path, f"power_limit,time,power\n100,2.0,90\n{bad_row}\n300,1.0,240\n", "nums.csv")
    with pytest.raises(UsageError, match=r"nums\.csv, line 3"):
        PowerModel.from_csv(path)


@pytest.mark.parametrize("bad_row", ["200,1.2,-170", "200,0,170", "0,1.2,170", "200,nan,170"])
def test_a_non_positive_value_is_a_usage_error(tmp_path: Path, bad_row: str) -> None:
    path = write_csv(tmp_path, f"power_limit,time,power\n100,2.0,90\n{bad_row}\n300,1.0,240\n")
    with pytest.raises(UsageError, match="positive"):
        PowerModel.from_csv(path)


def test_a_non_positive_value_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "power_limit,time,power\n100,2.0,90\n200,1.2,-170\n300,1.0,240\n", "neg.csv")
    with pytest.raises(UsageError, match=r"neg\.csv, line 3"):
        PowerModel.from_csv(path)


def test_duplicate_limits_in_code_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="distinct"):
        PowerModel((100.0, 200.0, 200.0), (2.0, 1.2, 1.1), (90.0, 170.0, 180.0))


def test_duplicate_limits_name_the_file_and_the_line(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "power_limit,time,power\n100,2.0,90\n200,1.2,170\n200,1.1,180\n", "dup.csv")
    with pytest.raises(UsageError, match=r"dup\.csv, line 4"):
        PowerModel.from_csv(path)


def test_a_model_with_a_single_limit_has_no_range_and_is_refused() -> None:
    with pytest.raises(UsageError, match="minimum limit"):
        PowerModel((200.0,), (1.0,), (150.0,))


def test_a_negative_idle_power_is_refused() -> None:
    with pytest.raises(UsageError, match="idle_power_w"):
        PowerModel(HAND.power_limits_w, HAND.time_factors, HAND.busy_power_w, idle_power_w=-1.0)


def test_simulated_gpus_load_the_csv_model_by_path(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "power_limit,time,power\n150,1.5,120\n250,1.0,200\n")
    (gpu,) = wattwise.devices.simulated_gpus(1, power_model=path)
    rng = gpu.power_limit_range()
    assert (rng.min_w, rng.max_w) == (150.0, 250.0)
