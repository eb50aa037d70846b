"""Which of the agent's GPUs a job sees: `CUDA_VISIBLE_DEVICES` read as CUDA does (issue 26)."""

from __future__ import annotations

import pytest

from wattwise.devices.agent import gpu_uuid, job_gpu_specs
from wattwise.devices.base import NotSupportedError
from wattwise.devices.nvml import visible_nvml_indices

SPECS = [{"backend": "nvml", "index": i, "uuid": f"GPU-{i}aaaaaaa-0000-0000-0000-00000000000{i}"} for i in range(4)]


@pytest.mark.parametrize(
    ("visible", "node_indices"),
    [
        (None, [0, 1, 2, 3]),
        ("2", [2]),
        ("3,1", [3, 1]),
        ("GPU-3a,0", [3, 0]),
        ("1,7,2", [1]),  # CUDA stops at the first entry that names no GPU
        ("1,1", [1]),  # or repeats one
        ("", []),
        ("-1", []),
    ],
)
def test_the_job_sees_the_node_gpus_cuda_shows_it_in_cudas_order(visible: str | None, node_indices: list[int]) -> None:
    assert [s["index"] for s in job_gpu_specs(SPECS, visible)] == node_indices


def test_a_mig_instance_stands_for_the_gpu_it_lives_on() -> None:
    parents = {"MIG-aa": SPECS[2]["uuid"], "MIG-bb": SPECS[2]["uuid"], "MIG-cc": SPECS[0]["uuid"]}
    seen = job_gpu_specs(SPECS, "MIG-aa,MIG-bb,MIG-cc", mig_parent=parents.get)
    assert [s["index"] for s in seen] == [2, 0]  # two instances of GPU 2 are GPU 2 once
    assert job_gpu_specs(SPECS, "MIG-zz,1", mig_parent=parents.get) == []  # an unknown instance ends the list


def test_without_a_parent_lookup_the_nvml_backend_still_refuses_a_mig_instance() -> None:
    with pytest.raises(NotSupportedError, match="MIG"):
        visible_nvml_indices("MIG-aa", [s["uuid"] for s in SPECS])


def test_a_simulated_gpu_gets_a_stable_uuid_of_its_own_and_nvmls_is_kept() -> None:
    a = {"backend": "simulated", "index": 0, "state_file": "/sim/gpu0.json"}
    b = {"backend": "simulated", "index": 1, "state_file": "/sim/gpu1.json"}
    assert gpu_uuid(a) == gpu_uuid(dict(a)) != gpu_uuid(b)
    assert gpu_uuid(a).startswith("GPU-") and len(gpu_uuid(a)) == 40
    assert gpu_uuid(SPECS[2]) == SPECS[2]["uuid"]


def test_a_slurm_job_id_the_agent_would_refuse_is_not_sent_and_one_warning_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import warnings

    from wattwise.devices.agent import batch_job_id
    from wattwise.errors import EnergyPluginWarning

    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    assert batch_job_id() == "4711"
    monkeypatch.setenv("SLURM_JOB_ID", "47\x0711")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert batch_job_id() == "" and batch_job_id() == ""
    [warning] = [w for w in caught if issubclass(w.category, EnergyPluginWarning)]
    assert str(warning.message).startswith("wattwise: SLURM_JOB_ID='47\\\\x0711' is not a job id the node agent")
