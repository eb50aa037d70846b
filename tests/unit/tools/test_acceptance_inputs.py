"""The acceptance command's own inputs: every bad argument is exit 2 with one line (no traceback, no check
skipped silently), and a resumed acceptance.json is read back with validation: a forged or damaged one is set
aside with one line and every check runs again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_pynvml import FakeClock, FakeGpu, FakeNvml
from wattwise.tools import acceptance
from wattwise.tools.acceptance import PASSED, main, run_checks


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--hold-limit", "x", "abc"], "--hold-limit SPEC: not JSON"),
        (["--hold-limit", "{not json", "200"], "--hold-limit SPEC: not JSON"),
        (["--hold-limit", "[1]", "200"], "--hold-limit SPEC must be a JSON object"),
        (["--hold-limit", "{}", "abc"], "--hold-limit WATTS: 'abc' is not a number of watts"),
        (["--hold-limit", "{}", "1e9"], "--hold-limit WATTS must be"),
        (["--gpu", "-1"], "--gpu must be a GPU's index, 0 to 1023 (got -1)"),
        (["--gpu", "99999999999999999999"], "--gpu must be a GPU's index, 0 to 1023"),
    ],
)
def test_a_bad_argument_is_exit_2_with_one_line(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--out", str(tmp_path / "acc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_a_gpu_this_machine_lacks_is_exit_2_naming_the_ones_it_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    assert main(["--gpu", "5", "--out", str(tmp_path / "acc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpu 5: no such GPU on this machine; give one of 0" in err
    assert not (tmp_path / "acc" / "acceptance.json").exists()


def forge(folder: Path, change: object) -> None:
    path = folder / "acceptance.json"
    report = json.loads(path.read_text())
    change(report["checks"][0])  # type: ignore[operator]
    path.write_text(json.dumps(report))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda c: c.pop("figures"), "is marked passed without its figures"),
        (lambda c: c["figures"].update(value="abc", cap_w=1e9), "figures.cap_w must be a number of W"),
        (lambda c: c["figures"].update(rows=[{"cap_w": "x"}]), "figures.rows[0].cap_w must be a number of W"),
        (lambda c: c.update(status="great"), "status must be passed, failed or skipped"),
        (lambda c: c.update(name="rm -rf"), "is not a check of this wattwise"),
    ],
)
def test_a_forged_acceptance_json_is_set_aside_and_every_check_runs_again(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: object,
    says: str,
) -> None:
    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    calls: list[str] = []

    def first(ctx: acceptance.Context) -> dict:
        calls.append("first")
        return {"value": 1.0}

    def second(ctx: acceptance.Context) -> dict:
        calls.append("second")
        return {"from_first": ctx.shared["first"]["value"] * 2}

    monkeypatch.setattr(acceptance, "CHECKS", [("first", first), ("second", second)])
    run_checks(tmp_path)
    forge(tmp_path, change)
    capsys.readouterr()
    report = run_checks(tmp_path)
    err = capsys.readouterr().err
    assert calls == ["first", "second", "first", "second"]
    assert [c["status"] for c in report["checks"]] == [PASSED, PASSED]
    assert err.count("\n") == 1 and says in err and "acceptance.json.rejected" in err and "runs again" in err
    assert (tmp_path / "acceptance.json.rejected").exists()


def test_ctrl_c_during_a_check_stops_keeps_what_finished_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    from wattwise.settings.guard import SignalledError

    FakeNvml([FakeGpu()], clock=FakeClock()).install(monkeypatch)
    calls: list[str] = []

    def first(ctx: acceptance.Context) -> dict:
        calls.append("first")
        return {"value": 1.0}

    def interrupted(ctx: acceptance.Context) -> dict:
        calls.append("interrupted")
        raise SignalledError(signal.SIGINT)  # what a run inside a check raises once Ctrl-C restored its limit

    def third(ctx: acceptance.Context) -> dict:
        calls.append("third")
        return {}

    monkeypatch.setattr(acceptance, "CHECKS", [("first", first), ("interrupted", interrupted), ("third", third)])
    assert main(["--out", str(tmp_path)]) == 130
    assert calls == ["first", "interrupted"]  # stopped: the next check did not run
    report = json.loads((tmp_path / "acceptance.json").read_text())
    assert [(c["name"], c["status"]) for c in report["checks"]] == [("first", PASSED)]
    assert "interrupted during interrupted" in report["notes"][-1]


def test_the_report_a_run_writes_is_read_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu(demand_w=250.0)], clock=FakeClock()).install(monkeypatch)
    report = run_checks(tmp_path, only=["discovery", "power_limit", "energy_counter", "clocks"])
    known = {name for name, _ in acceptance.all_checks()}
    assert [acceptance.check_problem(c, known) for c in report["checks"]] == [None] * 4
