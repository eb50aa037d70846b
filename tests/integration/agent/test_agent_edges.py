"""The agent's and its commands' edges: a metrics port in use, a GPU the node does not have, Ctrl-C."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path


def test_a_metrics_port_in_use_is_named_in_one_line_and_the_agent_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = ["agent", "serve", "--socket", str(tmp_path / "run" / "agent.sock"), "--backend", "simulated"]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "wattwise",
                *serve,
                "--state-dir",
                str(tmp_path / "state"),
                "--metrics-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"wattwise agent: error: --metrics-port {port}: cannot listen on 127.0.0.1:{port} (")
    assert "choose another port" in line and "check the paths" not in line
    assert not (tmp_path / "run" / "agent.sock").exists()
