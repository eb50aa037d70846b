"""The `wattwise` command: what it prints and the exit codes scripts rely on.

Most calls run `main([...])` in-process; a few run the installed console script, as a user would.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import Field, fields
from pathlib import Path
from typing import Any

import pytest

import wattwise.devices
import wattwise.devices.rapl
from tests.support.cli_fixtures import IDLE_W
from tests.support.config_samples import COMPANIONS, SAMPLES, text, value_at
from tests.support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml
from tests.support.powercap import FakePowercap
from wattwise.cli.demo import FLAGS, flag_of, options_of
from wattwise.cli.main import build_parser, main
from wattwise.cli.simulate import SETTING_FLAGS
from wattwise.config import EnergyConfig, config_keys, default_of
from wattwise.errors import UsageError
from wattwise.recurring.spec import JobSpec
from wattwise.tools.demo import FIXED_KEYS, DemoOptions

pytestmark = pytest.mark.usefixtures("cli_workdir")


def assert_one_line_error(err: str, *needles: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0]


# -- devices ------------------------------------------------------------------------------------------


def test_devices_on_a_bare_machine_lists_nothing_and_says_why(
    real_auto_backend: None, bare_machine: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["devices"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "no devices to measure"
    assert not any("SIMULATED" in line or "Simulated" in line for line in out)
    notes = [line for line in out if line.startswith("note: ")]
    assert len(notes) == len(out) - 1
    assert any(n.startswith("note: nvml: unavailable") and "libnvidia-ml.so" in n for n in notes)
    assert any(n.startswith("note: rapl: unavailable") and "no-powercap not found" in n for n in notes)
    assert notes[-1].startswith("note: no NVIDIA GPU found") and "nothing to measure" in notes[-1]
    assert "power-limit tuning and capping need a GPU" in notes[-1]


def test_devices_without_a_gpu_lists_the_cpu_through_rapl(
    real_auto_backend: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeNvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND).install(monkeypatch)
    tree = FakePowercap(tmp_path / "sys")
    tree.add_control_type("intel-rapl")
    tree.add_zone("intel-rapl:0", "package-0")
    monkeypatch.setattr(
        wattwise.devices.rapl, "rapl_domains", functools.partial(wattwise.devices.rapl.rapl_domains, tree.root)
    )
    assert main(["devices"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "cpu0: CPU package-0 (rapl)"
    assert out[-1].startswith("note: no NVIDIA GPU found: measuring the CPU (RAPL) only")
    assert not any("SIMULATED" in line for line in out)


def test_devices_json_shape(real_auto_backend: None, bare_machine: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"devices", "notes", "simulated"}
    assert data["devices"] == [] and data["simulated"] is False
    assert all(isinstance(n, str) for n in data["notes"])
    assert any(n.startswith("nvml: unavailable") for n in data["notes"])
    assert any(n.startswith("rapl: unavailable") for n in data["notes"])
    assert "need a GPU" in data["notes"][-1]


@pytest.mark.parametrize("ask", [["--backend", "simulated"], []])
def test_devices_lists_the_simulated_gpu_asked_for_by_name(
    bare_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ask: list[str]
) -> None:
    monkeypatch.setenv("WATTWISE_BACKEND", "simulated")  # asks by name when the flag does not
    assert main(["devices", *ask]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpu0: Simulated GPU")
    assert "[SIMULATED]" in out[0] and "power limit 300 W (range 100-300 W)" in out[0]
    assert main(["devices", "--json", *ask]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    (gpu,) = data["devices"]
    assert gpu["key"] == "gpu0" and gpu["backend"] == "simulated" and gpu["simulated"] is True
    assert gpu["energy_counter"] is True
    assert gpu["power_limit_w"] == 300.0 and gpu["power_limit_range_w"] == [100.0, 300.0]
    assert gpu["idle_power_w"] == IDLE_W
    assert gpu["physics"] == "ideal" and gpu["energy_update_period_s"] == 0.0  # the unit tier's physics
    assert (wattwise.devices.SIMULATED_BY_ENV_NOTE in data["notes"]) == (not ask)
    assert not any(n.startswith("nvml:") or "no NVIDIA GPU" in n for n in data["notes"])


def test_devices_shows_the_simulated_gpus_physics_and_its_counters_period(
    bare_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "realistic")
    assert main(["devices", "--backend", "simulated"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("realistic physics (energy counter every 100 ms, like an NVIDIA H100 SXM (Hopper))")
    assert main(["devices", "--backend", "simulated", "--json"]) == 0
    (gpu,) = json.loads(capsys.readouterr().out)["devices"]
    assert gpu["physics"] == "realistic"
    assert gpu["energy_update_period_s"] == pytest.approx(0.100)
    assert gpu["simulated_gpu"] == "h100" and gpu["preset"]["power_reading"] == "averaged"
    assert gpu["physics_parameters"]["energy_read_median_s"] == pytest.approx(0.00281)


def test_devices_refuses_an_unknown_simulated_physics_in_one_line(
    bare_machine: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_SIMULATED_PHYSICS", "perfect")
    assert main(["devices", "--backend", "simulated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "WATTWISE_SIMULATED_PHYSICS must be one of realistic, ideal (got 'perfect')" in err[0]


def test_a_bad_wattwise_backend_is_a_one_line_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WATTWISE_BACKEND", "bogus")
    assert main(["devices"]) == 2
    assert_one_line_error(capsys.readouterr().err, "WATTWISE_BACKEND must be one of auto, nvml, simulated", "'bogus'")


def test_measure_of_a_missing_command_exits_127_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["measure", "--", "no-such-command-wattwise-test"]) == 127
    assert_one_line_error(capsys.readouterr().err, "command not found", "no-such-command-wattwise-test")


@pytest.mark.parametrize("argv", [["measure"], ["measure", "--"]])
def test_measure_without_a_command_exits_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert_one_line_error(capsys.readouterr().err, "wattwise measure: error:", "no command given")


def test_an_unknown_sub_command_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "invalid choice", "frobnicate")


def test_no_sub_command_exits_2_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "measure" in err


def test_no_sub_command_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert_one_line_error(capsys.readouterr().err, "wattwise")


@pytest.mark.parametrize("eta", ["2", "-0.5"])
def test_demo_with_a_bad_eta_exits_2_with_one_line_naming_eta(eta: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", f"--eta={eta}"]) == 2
    assert_one_line_error(capsys.readouterr().err, "wattwise demo: error:", "eta")


def test_a_flag_of_the_wrong_type_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--eta", "half"])
    assert exit_info.value.code == 2
    assert_one_line_error(capsys.readouterr().err, "--eta")


# -- restore ------------------------------------------------------------------------------------------


def test_restore_with_nothing_to_do_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["restore"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to restore"


def test_restore_json_with_nothing_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["restore", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"restored": [], "failed": []}


# -- configuration: every config key reaches `wattwise demo`; errors name the flags ---------------------


def demo_config(*argv: str) -> EnergyConfig:
    """The energy configuration `wattwise demo ARGV` trains its tuned run with."""
    return options_of(build_parser().parse_args(["demo", *argv])).energy_config()


def demo_option_keys() -> dict[str, Field[Any]]:
    return {f.metadata["key"]: f for f in fields(DemoOptions) if "key" in f.metadata}


def test_every_config_key_is_a_demo_flag_a_set_item_or_fixed_by_the_demo() -> None:
    fixed = set(FIXED_KEYS) - set(demo_option_keys())
    assert fixed == {"devices.backend", "power_limit.mode"}  # simulated GPU; tuned run, then the baseline
    # `devices.backend` reaches the commands that measure: `wattwise measure --backend`, `devices --backend`.
    for command in ("measure", "devices"):
        assert build_parser().parse_args([command, "--backend", "simulated"]).backend == "simulated"
    for key in config_keys():
        if key in fixed:
            continue
        value, option = SAMPLES[key], demo_option_keys().get(key)
        argv = [flag_of(option), text(value)] if option else ["--set", f"{key}={text(value)}"]
        extra = [arg for item in COMPANIONS.get(key, []) if "mode" not in item for arg in ("--set", item)]
        expected = str(Path(value).resolve()) if key == "devices.simulated.power_model" else value
        assert value_at(demo_config(*argv, *extra), key) == expected, key


def test_demo_flags_are_demo_options_fields() -> None:
    parser = build_parser().parse_args(["demo"])
    assert {f.name for f in fields(DemoOptions)} <= set(vars(parser))
    assert options_of(parser) == DemoOptions()
    # The flags of the first release stay.
    assert {
        "--framework",
        "--power-model",
        "--selector",
        "--eta",
        "--max-slowdown",
        "--steps-after-tuning",
        "--profile-steps",
        "--warmup-steps",
        "--step-w",
        "--base-step-time",
        "--output-dir",
    } <= set(FLAGS.values())


def test_demo_options_take_the_config_defaults_except_the_demos_own() -> None:
    own = {"devices.simulated.base_step_time_s", "output_dir"}  # a slower step to watch; its own folder
    for key, option in demo_option_keys().items():
        assert (option.default == default_of(key)) is (key not in own), key
    assert DemoOptions().energy_config().power_limit.eta == default_of("power_limit.eta")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--base-step-time", "0"], "--base-step-time must be > 0"),
        (["--profile-steps", "0"], "--profile-steps must be > 0"),
        (["--selector", "fastest"], "--selector must be one of"),
        (["--set", "power_limit.eta=0.3"], "--set: power_limit.eta is the demo's option --eta"),
        (["--set", "devices.backend=nvml"], "the demo sets devices.backend itself"),
        (["--set", "power_limit.etaa=1"], "unknown config key 'power_limit.etaa'"),
        (
            ["--set", "carbon.interval_s=0", "--set", "carbon.aware=true", "--set", "carbon.intensity_csv=ci.csv"],
            "carbon.interval_s must be > 0",
        ),
    ],
)
def test_a_bad_demo_setting_is_one_line_naming_its_flag(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *argv]) == 2
    assert_one_line_error(capsys.readouterr().err, "wattwise demo: error:", needle)


def test_a_bad_backend_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--backend", "cuda"]) == 2
    assert_one_line_error(capsys.readouterr().err, "wattwise devices: error: --backend must be one of")


def test_simulate_names_its_flags_where_the_job_spec_names_its_fields() -> None:
    with pytest.raises(UsageError) as caught:
        JobSpec("j", (8, 16), 8, 0.9, 5, 300.0, eta=2.0)
    assert str(caught.value).startswith("eta must be between 0 and 1")  # the library names its field
    assert caught.value.message(SETTING_FLAGS).startswith("--eta must be between 0 and 1")


def _sigterm_then(ending: str) -> Any:
    """A stand-in for `run_demo`: SIGTERM arrives mid-run; then the framework ends the run as `ending` says."""
    import signal

    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def fake_run_demo(options: DemoOptions) -> dict[str, Any]:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except BaseException:
            if ending == "ours":
                raise
        if ending == "lightning":  # Lightning noted the SIGTERM too and leaves the fit its own way
            raise SIGTERMException
        return {}  # "swallowed": the run went on to its end

    return fake_run_demo


@pytest.mark.parametrize("ending", ["ours", "lightning", "swallowed"])
def test_a_sigterm_during_the_demo_exits_143_whatever_the_framework_does_with_it(
    ending: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Lightning's own SIGTERM handler ends a fit with a silent SystemExit (exit 0), which can overtake the
    # demo's exception while the fit unwinds: the demo must still say it was interrupted, and exit 143.
    monkeypatch.setattr("wattwise.cli.demo.run_demo", _sigterm_then(ending))
    assert main(["demo"]) == 143
    err = capsys.readouterr().err
    assert "interrupted by SIGTERM" in err and len(err.strip().splitlines()) == 1


def test_a_framework_exit_without_a_signal_is_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def exits(options: DemoOptions) -> dict[str, Any]:
        raise SystemExit(3)

    monkeypatch.setattr("wattwise.cli.demo.run_demo", exits)
    with pytest.raises(SystemExit) as exit_info:
        main(["demo"])
    assert exit_info.value.code == 3
