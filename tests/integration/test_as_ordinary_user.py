"""Training as an ordinary user whose folders wattwise may not write (a container's read-only HOME, a
shared output folder): training goes on, one warning says what wattwise could not do, and no GPU setting
is changed that could not be journalled for restoring.

Run as the test's own user, or, under root (CI), as an ordinary user with no account (tests/support/ordinary_user.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import ordinary_user

#: A short Lightning fit with EnergyCallback on the simulated GPU; prints the steps, the summary and the
#: GPU's power limit afterwards as one JSON line. argv: output folder, mode.
FIT = """
import json, sys
import lightning.pytorch as pl
from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
out, mode = sys.argv[1], sys.argv[2]
callback = EnergyCallback(mode=mode, backend="simulated", output_dir=out,
                          overrides=["power_limit.wait_steps=1", "power_limit.warmup_steps=1",
                                     "power_limit.profile_steps=2", "power_limit.step_w=100"])
trainer = pl.Trainer(max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=[callback])
trainer.fit(EmulatedModule())
gpus = callback.run.gpus if callback.run is not None else []
print(json.dumps({"steps": trainer.global_step, "summary": callback.summary,
                  "limits_w": [gpu.power_limit_w() for gpu in gpus]}))
"""


def _fit(tmp_path: Path, *, home: Path, out: Path, mode: str) -> tuple[dict[str, object], list[str]]:
    env = {"HOME": str(home), "MPLCONFIGDIR": str(tmp_path / "mpl")}
    done = ordinary_user.run_unprivileged(["-c", FIT, str(out), mode], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "EnergyPluginWarning" in line or "wattwise: " in line]
    return json.loads(done.stdout.strip().splitlines()[-1]), warned


@pytest.fixture
def shared(tmp_path: Path):  # type: ignore[no-untyped-def]
    """tmp_path, or under root a folder the ordinary user may enter; a read-only folder `ro` in it."""
    if ordinary_user.IS_ROOT:
        with ordinary_user.shared_folder("wattwise-user-") as base:
            yield base
    else:
        yield tmp_path
        os.chmod(tmp_path / "ro", 0o755)


def test_an_output_folder_it_may_not_write_leaves_training_alone_with_one_warning(shared: Path) -> None:
    (shared / "ro").mkdir()
    (shared / "home").mkdir()
    os.chmod(shared / "ro", 0o555)
    result, warned = _fit(shared, home=shared / "home", out=shared / "ro" / "runs", mode="measure")
    assert result["steps"] == 40  # the fit ran to its end
    assert len(warned) == 1, warned
    assert "Permission denied" in warned[0] and str(shared / "ro" / "runs") in warned[0]
    assert "training goes on" in warned[0]
    assert result["summary"] is None  # nothing measured is reported as if it were
    assert not (shared / "ro" / "runs").exists()


def test_a_read_only_home_means_no_journal_so_no_limit_is_changed_and_the_summary_says_why(shared: Path) -> None:
    (shared / "ro").mkdir()
    os.chmod(shared / "ro", 0o555)
    result, warned = _fit(shared, home=shared / "ro", out=shared / "runs", mode="tune")
    assert result["steps"] == 40
    # One warning: the run history, which cannot be written in the read-only home either, adds none of its own
    # (the same cause; wattwise.run.history logs it).
    assert len(warned) == 1, warned
    assert "cannot create the journal folder" in warned[0] and "no GPU setting is changed" in warned[0]
    summary = result["summary"]
    assert isinstance(summary, dict) and summary["status"] == "completed"
    assert summary["settings_timeline"] == [] and result["limits_w"] == [300.0]  # never changed
    notes = [n for n in summary["notes"] if "measurement only" in n]
    assert len(notes) == 1 and "journal" in notes[0]
    assert json.loads((shared / "runs" / "summary.json").read_text())["notes"] == summary["notes"]


def test_the_demo_with_an_output_folder_it_may_not_write_stops_with_one_line(shared: Path) -> None:
    (shared / "ro").mkdir()
    (shared / "home").mkdir()
    os.chmod(shared / "ro", 0o555)
    done = ordinary_user.run_unprivileged(
        ["-m", "wattwise", "demo", "--output-dir", str(shared / "ro" / "runs"), "--steps-after-tuning", "5"],
        env={"HOME": str(shared / "home"), "MPLCONFIGDIR": str(shared / "mpl")},
        cwd=shared,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"wattwise demo: error: --output-dir {shared / 'ro' / 'runs'}: the demo cannot write there (Permission "
        "denied); choose a folder you may write"
    ]
    assert "Traceback" not in done.stderr and done.stdout == ""
