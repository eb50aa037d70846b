"""The node agent: power control for users who are not root.

One privileged agent per node owns every GPU setting change. A client process (identified by the
kernel, SO_PEERCRED) that changes a GPU holds a lease on it; the agent records the original settings
first and restores them the moment the holder's process ends, when it releases, when the agent stops,
and at the agent's next start after a crash (from its own journal).

- `leases`: the lease table (pure: who holds which GPU, and the originals to restore);
- `config`: the admin's bounds (who may change settings, power-limit floors and ceilings, clock range);
- `journal`: the agent's on-disk record of the originals, applied at its next start after a crash;
- `server`: the HTTP API over a Unix socket (aiohttp) and the process watchers;
- `client`: the `agent` device backend, relaying setting changes to the agent.
"""

#: Where the agent listens unless told otherwise, and the variable that tells clients where it is.
DEFAULT_SOCKET = "/run/wattwise/agent.sock"
SOCKET_ENV = "WATTWISE_AGENT_SOCKET"
#: The agent's own state (its journal): root-owned, 0700.
DEFAULT_STATE_DIR = "/var/lib/wattwise-agent"
#: The longest job name the agent shows for a holder.
MAX_JOB_CHARS = 128
