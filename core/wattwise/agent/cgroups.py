"""`allocation: cgroup`: a process may change a GPU its device cgroup lets it open, as the kernel decides.

The container runtime (Kubernetes' device plugin, Docker's `--gpus`) and SLURM with `ConstrainDevices=yes`
give a job its GPUs by letting its cgroup open their device nodes (`/dev/nvidiaN`) and no others. That
rule is the kernel's: a process cannot change it from inside its cgroup, whatever its environment says.
On cgroup v1 the rule is a readable list; on cgroup v2 it is an eBPF program nobody can read back. So the
agent asks the kernel instead of reading the rule: a short-lived helper process of the agent's joins the
caller's cgroup (`cgroup.procs`) and opens the GPU's device node there. The device controller checks every
open in the cgroup, root's too: a node the cgroup may not open fails with EPERM (not allowed), anything
else (opened, or a driver's own error after the check) means the cgroup may open it.

What this trusts: the kernel's record of the caller's cgroup (`/proc/PID/cgroup`, as the agent sees it:
the agent must run in the host's cgroup namespace) and the device rules the runtime or SLURM set on it. A
node where jobs run without a device cgroup lets every process open every GPU: there the policy allows
every free GPU, as `none` does.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from wattwise.devices.base import DeviceSpec

#: Where the cgroup hierarchies are mounted.
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Seconds the helper may take to join the cgroup and open the node.
PROBE_TIMEOUT_S = 5.0
#: The helper's exit code when the device cgroup refused the open.
DENIED = 3
#: The helper: join the cgroup (argv 1: its cgroup.procs), then open the device node (argv 2).
PROBE = f"""
import os, sys
with open(sys.argv[1], "w") as fh:
    fh.write(str(os.getpid()))
try:
    os.close(os.open(sys.argv[2], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
except PermissionError:
    sys.exit({DENIED})
except OSError:
    pass
"""


class CgroupUnknown(Exception):
    """The caller's device cgroup, or the GPU's device node, cannot be found: the agent cannot decide."""


@dataclass(frozen=True)
class CgroupAnswer:
    """What the kernel said: whether the device cgroup `cgroup` may open the GPU's device node `node`."""

    may_open: bool
    cgroup: Path
    node: str


def check_gpu(pid: int, spec: DeviceSpec) -> CgroupAnswer:
    """Whether process `pid`'s device cgroup may open the GPU of `spec` (`Device.spec()`).

    Blocking (it reads /proc and runs the helper, up to `PROBE_TIMEOUT_S`): the agent calls it from a
    worker thread, never on its event loop.

    Raises:
        CgroupUnknown: The cgroup or the device node cannot be found, or the helper could not decide.
    """
    cgroup = device_cgroup(pid)
    node = device_node(spec)
    return CgroupAnswer(cgroup_may_open(cgroup, node), cgroup, node)


def device_cgroup(pid: int, root: Path = CGROUP_ROOT) -> Path:
    """The folder of the cgroup whose device rules apply to process `pid`.

    The v1 `devices` hierarchy where it is mounted, else the v2 unified hierarchy.

    Raises:
        CgroupUnknown: The process is gone, or its cgroup lies outside the agent's cgroup namespace.
    """
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii", errors="replace")
    except OSError:
        raise CgroupUnknown(f"pid {pid} is gone") from None
    return cgroup_folder(text, root)


def cgroup_folder(proc_cgroup: str, root: Path = CGROUP_ROOT) -> Path:
    """The device cgroup's folder under `root` from the text of a `/proc/PID/cgroup` (pure: no I/O).

    Raises:
        CgroupUnknown: No devices (v1) or unified (v2) line, or a path outside the namespace's root.
    """
    v1, v2 = None, None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "devices" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    folder = root / "devices" if v1 is not None and (root / "devices").is_dir() else root
    path = v1 if v1 is not None and folder != root else v2
    if path is None or not path.startswith("/") or "/.." in path:
        raise CgroupUnknown(
            f"the caller's cgroup ({path or 'none'}) is not in the agent's cgroup namespace; run the agent in "
            "the host's (the DaemonSet's hostPID and /sys/fs/cgroup)"
        )
    return folder / path.lstrip("/")


def device_node(spec: DeviceSpec, drivers: str = "/proc/driver/nvidia/gpus") -> str:
    """The device node a process opens to use the GPU of `spec` (`Device.spec()`).

    An NVIDIA GPU's is `/dev/nvidiaN`, N its minor number as the driver lists it under `drivers`
    (matched by UUID). A simulated GPU's is `<state file>.dev` beside its state file, when one was made
    (with `mknod`, standing for `/dev/nvidiaN` on a node without GPUs).

    Raises:
        CgroupUnknown: The GPU has no device node the agent knows of.
    """
    state_file = spec.get("state_file")
    if isinstance(state_file, str) and state_file:
        node = f"{state_file}.dev"
        if os.path.exists(node):
            return node
        raise CgroupUnknown(f"its simulated device node {node} does not exist")
    uuid = spec.get("uuid")
    for info in glob.glob(f"{drivers}/*/information"):
        try:
            fields = dict(
                (key.strip(), value.strip())
                for key, _, value in (line.partition(":") for line in Path(info).read_text().splitlines())
            )
        except OSError:
            continue
        if uuid and fields.get("GPU UUID") == uuid and fields.get("Device Minor", "").isdigit():
            return f"/dev/nvidia{fields['Device Minor']}"
    raise CgroupUnknown(f"the driver lists no device node for it (uuid {uuid or 'unknown'})")


def cgroup_may_open(cgroup: Path, node: str) -> bool:
    """Whether the device rules of `cgroup` let its processes open `node`: asked of the kernel, by a helper.

    Raises:
        CgroupUnknown: The helper could not join the cgroup (gone, full) or did not answer in time.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-S", "-c", PROBE, str(cgroup / "cgroup.procs"), node],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CgroupUnknown(f"cannot check its cgroup {cgroup}: no answer in {PROBE_TIMEOUT_S:g} s") from None
    except OSError as err:
        raise CgroupUnknown(f"cannot check its cgroup {cgroup} ({err.strerror or type(err).__name__})") from None
    if done.returncode not in (0, DENIED):
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no answer"])[-1]
        raise CgroupUnknown(f"cannot join its cgroup {cgroup} to check ({last})")
    return done.returncode == 0
