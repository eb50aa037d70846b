"""The node agent: power control for users who are not root.

One privileged agent per node owns every GPU setting change. A client process (identified by the
kernel, SO_PEERCRED) that changes a GPU holds a lease on it; the agent records the original settings
first and restores them the moment the holder's process ends, when it releases, when the agent stops,
and at the agent's next start after a crash (from its own journal).

- `leases`: the lease table (pure: who holds which GPU, and the originals to restore);
- `config`: the admin's bounds (who may change settings, power-limit floors and ceilings, clock range);
- `journal`: where the agent keeps its settings journal (`wattwise.settings`: the guard's format, checks
  and writing), applied at its next start after a crash;
- `server`: the HTTP API over a Unix socket (aiohttp) and the process watchers.

Its clients reach it through the `agent` device backend, `wattwise.devices.agent` (the socket, the HTTP
calls, `AgentClient`): the agent sits on top of `wattwise.devices`, which never imports it.
"""

from wattwise.devices.agent import DEFAULT_SOCKET, MAX_JOB_CHARS, SOCKET_ENV, is_job_name

__all__ = ["DEFAULT_SOCKET", "DEFAULT_STATE_DIR", "MAX_JOB_CHARS", "SOCKET_ENV", "is_job_name"]

#: The agent's own state (its journal): root-owned, 0700.
DEFAULT_STATE_DIR = "/var/lib/wattwise-agent"
