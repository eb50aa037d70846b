"""The node agent: power control for users who are not root.

One privileged agent per node owns every GPU setting change. A client process (identified by the
kernel, SO_PEERCRED) that changes a GPU holds a lease on it; the agent records the original settings
first and restores them the moment the holder's process ends, when it releases, when the agent stops,
and at the agent's next start after a crash (from its own journal).

- `leases`: the lease table (pure: who holds which GPU, and the originals to restore);
- `config`: the admin's bounds (who may change settings, power-limit floors and ceilings, clock range);
- `journal`: where the agent keeps its settings journal (`wattwise.settings`: the guard's format, checks
  and writing), applied at its next start after a crash;
- `processes`: the processes it serves as the kernel shows them (peer credentials, /proc) and the
  watchers that tell when a holder has ended;
- `jobs`: the node's record of which GPUs the scheduler gave each job (`JobRegistry`, `jobs/registered.json`);
- `cgroups`: the `cgroup` policy's question to the kernel (may the caller's device cgroup open a GPU?);
- `agent`: its logic (`Agent`: the GPUs, leases, journal and audit log), which knows no HTTP: a request it
  refuses raises an `AgentRefusal` of one kind (invalid, not allowed, no such GPU, conflict, fault);
- `http`: the HTTP API (aiohttp): routes, request parsing, and each refusal's status;
- `serve`: the Unix socket (checked, bound, shared with a group) and serving until SIGTERM;
- `metrics`: per-GPU energy and power for Prometheus; `audit`: one JSON line per change;
  `connections`: limits on the clients' connections.

Its clients reach it through the `agent` device backend, `wattwise.devices.agent` (the socket, the HTTP
calls, `AgentClient`, and the wire: each request body and answer, typed), which the agent builds its
answers with: the agent sits on top of `wattwise.devices`, which never imports it.
"""

from wattwise.devices.agent import DEFAULT_SOCKET, MAX_JOB_CHARS, SOCKET_ENV, is_job_name

__all__ = ["DEFAULT_SOCKET", "DEFAULT_STATE_DIR", "MAX_JOB_CHARS", "SOCKET_ENV", "is_job_name"]

#: The agent's own state (its journal): root-owned, 0700.
DEFAULT_STATE_DIR = "/var/lib/wattwise-agent"
