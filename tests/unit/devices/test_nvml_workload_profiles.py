"""NVML's workload power profiles (driver 570 and later): listed, requested and restored like every setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_pynvml import NVML_ERROR_NOT_SUPPORTED, FakeGpu, FakeNvml
from wattwise.devices.base import NoPermissionError, NotSupportedError
from wattwise.devices.nvml import NvmlGPU, nvml_gpus, profile_id
from wattwise.errors import UsageError
from wattwise.settings.apply import WORKLOAD_PROFILES
from wattwise.settings.guard import SettingsGuard
from wattwise.settings.journal import JournalProblem, read_journal

#: max_q (1), llm_training (7), training (20) and one a newer driver adds (40).
OFFERED = (1, 7, 20, 40)


@pytest.fixture(autouse=True)
def _no_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def gpu_with(monkeypatch: pytest.MonkeyPatch, fake_gpu: FakeGpu, **options: object) -> NvmlGPU:
    FakeNvml([fake_gpu], **options).install(monkeypatch)  # type: ignore[arg-type]
    (gpu,) = nvml_gpus()
    return gpu


def test_the_profiles_a_gpu_offers_are_listed_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = gpu_with(monkeypatch, FakeGpu(workload_profiles=OFFERED, requested_profiles={1}))
    assert gpu.workload_power_profiles() == ["max_q", "llm_training", "training", "profile_40"]
    assert gpu.requested_workload_power_profiles() == ["max_q"]
    assert profile_id("profile_40") == 40 and profile_id("training") == 20
    with pytest.raises(UsageError, match="no workload power profile is called 'fast'"):
        profile_id("fast")


def test_a_request_makes_exactly_those_profiles_requested(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu = FakeGpu(workload_profiles=OFFERED, requested_profiles={1})
    gpu = gpu_with(monkeypatch, fake_gpu)
    gpu.request_workload_power_profiles(["training"])
    assert fake_gpu.requested_profiles == {20}  # max_q cleared, training requested
    gpu.request_workload_power_profiles([])
    assert fake_gpu.requested_profiles == set()


def test_a_driver_without_profiles_or_without_the_entry_points_is_not_supported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = gpu_with(monkeypatch, FakeGpu())  # the GPU answers NOT_SUPPORTED
    with pytest.raises(NotSupportedError, match=f"NVML error {NVML_ERROR_NOT_SUPPORTED}"):
        gpu.workload_power_profiles()
    missing = {"nvmlDeviceWorkloadPowerProfileGetProfilesInfo", "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles"}
    gpu = gpu_with(monkeypatch, FakeGpu(workload_profiles=OFFERED), missing_functions=missing)
    with pytest.raises(NotSupportedError, match="this driver has no workload power profiles"):
        gpu.workload_power_profiles()


def test_a_request_without_privileges_says_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = gpu_with(monkeypatch, FakeGpu(workload_profiles=OFFERED), privileged=False)
    with pytest.raises(NoPermissionError, match="needs root or CAP_SYS_ADMIN"):
        gpu.request_workload_power_profiles(["training"])


def test_the_guard_journals_the_profiles_found_and_puts_them_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu = FakeGpu(workload_profiles=OFFERED, requested_profiles={1})  # an admin asked for max_q
    gpu = gpu_with(monkeypatch, fake_gpu)
    guard = SettingsGuard(tmp_path / "journal", recover=False)
    guard.request_workload_power_profiles(gpu, ["training"])
    assert fake_gpu.requested_profiles == {20}
    journal = read_journal(guard.journal_path)  # what a restore after a SIGKILL reads back, validated
    assert [(c["setting"], c["original"]) for c in journal.changes] == [(WORKLOAD_PROFILES, ["max_q"])]
    guard.close()
    assert fake_gpu.requested_profiles == {1}
    assert not guard.journal_path.exists()


def test_a_journalled_profile_list_that_is_not_names_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "host-1-abc.json"
    change = {
        "device": {"backend": "nvml", "uuid": "GPU-1", "index": 0},
        "setting": WORKLOAD_PROFILES,
        "original": ["max_q; rm -rf /"],
    }
    path.write_text(json.dumps({"pid": 1, "host": "host", "changes": [change]}))
    path.chmod(0o600)
    with pytest.raises(JournalProblem, match="not a list of profile names"):
        read_journal(path)
