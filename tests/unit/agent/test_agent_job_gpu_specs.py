"""Which of the agent's GPUs a job sees: `CUDA_VISIBLE_DEVICES` read as CUDA does (issue 26)."""

from __future__ import annotations

import pytest

from wattwise.devices.agent import gpu_uuid, job_gpu_specs
from wattwise.devices.base import NotSupportedError

SPECS = [{"backend": "nvml", "index": i, "uuid": f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}"} for i in range(4)]


@pytest.mark.parametrize(("visible", "node_indices"), [
    (None, [0, 1, 2, 3]),
    ("2", [2]),
    ("3,1", [3, 1]),
    ("GPU-3a,0", [3, 0]),
    ("1,7,2", [1]),  # CUDA stops at the first entry that names no GPU
    ("1,1", [1]),  # or repeats one
    ("", []),
    ("-1", []),
])
def test_the_job_sees_the_node_gpus_cuda_shows_it_in_cudas_order(visible: str | None, node_indices: list[int]) -> None:
    assert [s["index"] for s in job_gpu_specs(SPECS, visible)] == node_indices


def test_a_mig_instance_is_refused_with_the_reason() -> None:
    with pytest.raises(NotSupportedError, match="MIG"):
        job_gpu_specs(SPECS, "MIG-4b1c2d3e-0000-0000-0000-000000000000")


def test_a_simulated_gpu_gets_a_stable_uuid_of_its_own_and_nvmls_is_kept() -> None:
    a = {"backend": "simulated", "index": 0, "state_file": "/sim/gpu0.json"}
    b = {"backend": "simulated", "index": 1, "state_file": "/sim/gpu1.json"}
    assert gpu_uuid(a) == gpu_uuid(dict(a)) != gpu_uuid(b)
    assert gpu_uuid(a).startswith("GPU-") and len(gpu_uuid(a)) == 40
    assert gpu_uuid(SPECS[2]) == SPECS[2]["uuid"]
