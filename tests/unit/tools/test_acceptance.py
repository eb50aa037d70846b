"""`wattwise acceptance`: its logic against the fake pynvml, its SIGKILL recovery on the simulated GPU,
and the honest no-GPU run CI makes (every check skipped with its reason, exit 0)."""

from __future__ import annotations

import json

from tests.support.fake_pynvml import FakeClock, FakeGpu, FakeNvml
from tests.support.paths import REPO_ROOT
from wattwise.cli.main import main
from wattwise.tools import acceptance
from wattwise.tools.acceptance import FAILED, PASSED, SKIPPED, run_checks


def statuses(report: dict) -> dict[str, tuple[str, str | None]]:
    return {c["name"]: (c["status"], c["reason"]) for c in report["checks"]}


def test_without_a_gpu_every_check_is_skipped_with_its_reason_and_the_command_exits_0(tmp_path, monkeypatch, capsys):
    FakeNvml([], clock=FakeClock()).install(monkeypatch)  # a driver, no GPU
    assert main(["acceptance", "--out", str(tmp_path / "acc")]) == 0
    report = json.loads((tmp_path / "acc" / "acceptance.json").read_text())
    assert report["schema"] == "wattwise.acceptance/1" and report["gpu"] is None
    assert [c["name"] for c in report["checks"]] == [name for name, _ in acceptance.CHECKS]
    assert all(c["status"] == SKIPPED and c["reason"] for c in report["checks"])
    assert report["summary"] == {PASSED: 0, FAILED: 0, SKIPPED: len(acceptance.CHECKS)}
    md = (tmp_path / "acc" / "acceptance.md").read_text()
    assert "no NVIDIA GPU" in md and "| discovery | skipped |" in md
    out = capsys.readouterr().out
    assert "discovery" in out and "acceptance.json" in out


def test_on_a_gpu_discovery_and_the_power_limit_are_checked_and_the_load_checks_say_why_they_skip(
    tmp_path, monkeypatch
):
    fake = FakeNvml([FakeGpu(demand_w=250.0)], clock=FakeClock()).install(monkeypatch)
    report = run_checks(tmp_path, only=["discovery", "power_limit", "energy_counter", "clocks"])
    got = statuses(report)
    assert got["discovery"][0] == PASSED
    (gpu,) = report["checks"][0]["figures"]["gpus"]
    assert gpu["name"] == "NVIDIA A100-SXM4-40GB" and gpu["energy_counter"] is True
    assert (gpu["power_limit_min_w"], gpu["power_limit_max_w"]) == (100.0, 400.0)
    assert gpu["sm_clocks_mhz"] == {"count": 6, "max": 1410, "min": 210}
    assert got["power_limit"][0] == PASSED
    figures = next(c["figures"] for c in report["checks"] if c["name"] == "power_limit")
    assert figures["read_back_w"] == 100.0 and figures["restored_w"] == 400.0
    assert figures["load"].startswith("skipped: ")  # torch here is a CPU build
    assert fake.gpus[0].limit_mw == 400_000
    for name in ("energy_counter", "clocks"):
        assert got[name][0] == SKIPPED and "CUDA" in (got[name][1] or "")


def test_a_driver_that_ignores_the_limit_fails_the_check_and_the_command_exits_1(tmp_path, monkeypatch):
    FakeNvml([FakeGpu(ignores_set=True)], clock=FakeClock()).install(monkeypatch)
    code = main(["acceptance", "--out", str(tmp_path), "--only", "discovery", "power_limit"])
    assert code == 1
    got = statuses(json.loads((tmp_path / "acceptance.json").read_text()))
    assert got["power_limit"][0] == FAILED and "reads back as 400 W" in (got["power_limit"][1] or "")


def test_a_refused_change_is_skipped_with_nvmls_own_words(tmp_path, monkeypatch):
    FakeNvml([FakeGpu()], clock=FakeClock(), privileged=False).install(monkeypatch)
    got = statuses(run_checks(tmp_path, only=["power_limit"]))
    status, reason = got["power_limit"]
    assert status == SKIPPED and "NVML said" in (reason or "") and "Insufficient Permissions" in (reason or "")


def test_out_naming_a_file_is_a_usage_error(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["acceptance", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file" in err[0]


def test_non_finite_figures_are_written_as_null(tmp_path, monkeypatch):
    def odd(ctx: acceptance.Context) -> dict:
        return {"ratio": float("inf"), "nested": [float("nan"), 1.0]}

    monkeypatch.setattr(acceptance, "CHECKS", [("odd", odd)])
    FakeNvml([], clock=FakeClock()).install(monkeypatch)
    run_checks(tmp_path)
    text = (tmp_path / "acceptance.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["checks"][0]["figures"] == {"ratio": None, "nested": [None, 1.0]}


def test_the_readme_says_where_real_gpu_figures_stand():
    readme = (REPO_ROOT / "README.md").read_text()
    assert "## Validated on real GPUs" in readme
