"""A free TCP port on this machine, for a launcher's rendezvous or a server the test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port nothing listens on now on 127.0.0.1 (the kernel's pick; free until someone takes it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
