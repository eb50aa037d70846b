"""Two-process DDP fits (CPU, gloo) tuning simulated GPUs, where one process cannot change its GPU.

`python ranks_differ.py HOME OUTPUT_DIR FAULT [FAULT ...]`, HOME being the WATTWISE_HOME. One fit per FAULT,
one after the other in the same two processes (Lightning's DDP launcher runs this script again for rank 1,
with LOCAL_RANK=1; the later fits reuse the process group), each with its own simulated GPUs
(HOME/FAULT/simulated) and output folder (OUTPUT_DIR/FAULT). FAULT is what differs in the process of rank 1:

- `held`: nothing here; the test holds that GPU from another wattwise process;
- `permission`: every change of its power limit is refused for lack of permission;
- `lost`: the GPU is lost after its first change: every later change, and every read of its energy, fails;
- `refused`: a limit under 250 W is refused by the device;
- `state`: its state folder (the guard's journal) cannot be created;
- `nodevice`: it finds no device to measure (no GPU, no readable CPU counter);
- `nobackend`: its devices cannot be opened, as when the backend is named (`devices.backend: nvml`) and
  its node's driver is missing;
- `sigterm-group`: no difference, but rank 0 sends SIGTERM to the whole process group after optimizer
  step 6, as SLURM's `scancel` does (run the script in a session of its own;
  tests/integration/lightning_energy/test_preemption.py; Lightning ends the processes there, so it is the
  last fit).

Rank 0 writes `--- FAULT` to stderr before each fit, so the test can tell whose warnings are whose. Run by
tests/integration/lightning_energy/test_ranks_agree.py: training must go on, exit 0, with one warning each.
"""

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import torch.distributed

import wattwise.run.measurement
from lightning_energy import EnergyCallback
from lightning_energy.demo import EmulatedModule
from wattwise.devices import Discovery
from wattwise.devices.base import DeviceError, DeviceLostError, NoPermissionError, NotSupportedError
from wattwise.devices.simulated import SimulatedGPU
from wattwise.tools.workload import use_one_cpu_thread


def make_rank_differ(fault: str, home: Path) -> Callable[[], None]:
    """Make this process (rank 1) differ as `fault` says (see the module docstring); returns the undo."""
    original, energy_j = SimulatedGPU.set_power_limit_w, SimulatedGPU.energy_j
    discover = wattwise.run.measurement.discover
    wattwise_home = os.environ.get("WATTWISE_HOME")
    changes = []

    def set_power_limit_w(gpu: SimulatedGPU, watts: float) -> None:
        changes.append(watts)
        if fault == "permission":
            raise NoPermissionError(f"gpu{gpu.index}: insufficient permissions to set the power limit")
        if fault == "lost" and len(changes) > 1:
            raise DeviceLostError(f"gpu{gpu.index}: the GPU has fallen off the bus")
        if fault == "refused" and watts < 250:
            raise DeviceError(f"gpu{gpu.index}: the driver refused a power limit of {watts:g} W")
        original(gpu, watts)

    def lost_energy_j(gpu: SimulatedGPU) -> float:
        if len(changes) > 1:
            raise DeviceLostError(f"gpu{gpu.index}: the GPU has fallen off the bus")
        return energy_j(gpu)

    SimulatedGPU.set_power_limit_w = set_power_limit_w  # type: ignore[method-assign]
    if fault == "lost":
        SimulatedGPU.energy_j = lost_energy_j  # type: ignore[method-assign]
    if fault == "nodevice":
        wattwise.run.measurement.discover = lambda *args, **kwargs: Discovery(notes=["no GPU found"])
    if fault == "nobackend":
        wattwise.run.measurement.discover = no_driver
    if fault == "state":
        blocker = home / "not-a-folder"
        blocker.write_text("a file where the state folder should be\n")
        os.environ["WATTWISE_HOME"] = str(blocker / "wattwise")

    def undo() -> None:
        SimulatedGPU.set_power_limit_w = original  # type: ignore[method-assign]
        SimulatedGPU.energy_j = energy_j  # type: ignore[method-assign]
        wattwise.run.measurement.discover = discover
        if wattwise_home is not None:
            os.environ["WATTWISE_HOME"] = wattwise_home

    return undo


def no_driver(*args: object, **kwargs: object) -> Discovery:
    """`discover` on a node whose NVIDIA driver is missing, with `devices.backend: nvml`."""
    raise NotSupportedError(
        "NVML unavailable: NVML Shared Library Not Found; devices.backend is nvml, which needs "
        "an NVIDIA driver (use auto, or simulated to try wattwise without one)"
    )


class Preempted(pl.Callback):
    """Rank 0 sends SIGTERM to the whole process group after optimizer step 6."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step == 6 and trainer.global_rank == 0 and not getattr(self, "sent", False):
            self.sent = True
            os.killpg(os.getpgid(0), signal.SIGTERM)


def fit(home: Path, out: Path, fault: str) -> None:
    """One tuned DDP fit with `fault` on rank 1; prints `FAULT rank R global_step N` on each rank."""
    rank1 = os.environ.get("LOCAL_RANK") == "1"
    if not rank1:
        print(f"--- {fault}", file=sys.stderr, flush=True)
    undo = make_rank_differ(fault, home / fault) if rank1 else (lambda: None)
    callback = EnergyCallback(
        mode="tune",
        backend="simulated",
        output_dir=str(out / fault),
        overrides=[
            "devices.simulated.base_step_time_s=0.01",
            f"devices.simulated.state_dir={home / fault / 'simulated'}",
            "power_limit.wait_steps=1",
            "power_limit.warmup_steps=1",
            "power_limit.profile_steps=2",
            "power_limit.step_w=100",
            "monitor.sync_cuda=false",
        ],
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=16,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[callback, *([Preempted()] if fault == "sigterm-group" else [])],
    )
    try:
        trainer.fit(EmulatedModule(dataset_size=1024))
    finally:
        undo()
    print(f"{fault} rank {trainer.global_rank} global_step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    home, out, faults = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    use_one_cpu_thread()
    for fault in faults:
        fit(home, out, fault)
    # Tear gloo down before interpreter exit: left to the C++ destructors it can abort the process.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
