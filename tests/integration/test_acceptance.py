"""`wattwise acceptance`: its logic against the fake pynvml, its SIGKILL recovery on the simulated GPU,
and the honest no-GPU run CI makes (every check skipped with its reason, exit 0)."""

from __future__ import annotations

from wattwise.devices import open_spec, simulated_gpus
from wattwise.tools.acceptance import PASSED, run_checks, spawn_limit_holder


def test_a_sigkilled_process_that_set_a_limit_is_restored_by_the_recovery_path(tmp_path):
    # The real child process and recovery, on a simulated GPU whose settings persist in a state file.
    (gpu,) = simulated_gpus(1)  # its state file lives in this test's own WATTWISE_HOME
    assert gpu.power_limit_w() == 300.0
    report = run_checks(tmp_path / "acc", gpus=[gpu], only=["kill_recovery"], spawn_holder=spawn_limit_holder)
    (check,) = report["checks"]
    assert check["status"] == PASSED, check
    assert check["figures"]["child_set_w"] == 100.0 and check["figures"]["after_recovery_w"] == 300.0
    assert open_spec(gpu.spec()).power_limit_w() == 300.0  # what a fresh process reads
