"""Root's requests to the node agent while another user connects and closes in a tight loop.

    sudo python benchmarks/agent_connect_loop.py [--loops 2] [--requests 20] [--uid 54321]

Starts `wattwise agent serve --backend simulated` on a temp socket (its group the flooders'), then forks
`--loops` processes that drop to `--uid` and connect to the socket and close at once, as fast as they
can. Meanwhile this process (root) times `--requests` status calls (`GET /v1/gpus`, a client timeout of
10 s), one after the other. Prints one JSON object: the status calls' median, 90th percentile and
maximum in seconds, how many failed, and the flooders' connects per second. Needs root (the flood runs
as another user, whose connections the agent counts apart from root's).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import tempfile
import time
from pathlib import Path

from agent import start_agent

from wattwise.devices import DeviceError
from wattwise.devices.agent import AgentClient


def flood(path: str, uid: int, gid: int, counter: Path) -> int:
    """Fork a process that runs as `uid` and connects and closes until killed; its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setgroups([gid])
        os.setgid(gid)
        os.setuid(uid)
        done = 0
        started = time.monotonic()
        while True:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                    s.connect(path)
            done += 1
            if done % 5000 == 0:
                counter.write_text(f"{done / (time.monotonic() - started):.0f}")
    finally:
        os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=2)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--uid", type=int, default=54321)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run it as root: the flood runs as another user")
    folder = Path(tempfile.mkdtemp(prefix="wattwise-connect-loop-"))
    os.chmod(folder, 0o755)
    proc, client = start_agent(folder, args.uid)
    counters = [folder / f"rate{i}" for i in range(args.loops)]
    for counter in counters:
        counter.touch()
        os.chown(counter, args.uid, args.uid)
    flooders = [flood(client.path, args.uid, args.uid, c) for c in counters]
    try:
        time.sleep(1.0)  # the loops run before the first request
        took: list[float] = []
        failed = 0
        for _ in range(args.requests):
            start = time.monotonic()
            try:
                AgentClient(client.path, timeout=10.0).status()
            except DeviceError:
                failed += 1
            took.append(time.monotonic() - start)
        rates = [int(c.read_text()) for c in counters if c.read_text()]
    finally:
        for pid in flooders:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    took.sort()
    print(
        json.dumps(
            {
                "loops": args.loops,
                "status_median_s": round(statistics.median(took), 4),
                "status_p90_s": round(took[int(0.9 * (len(took) - 1))], 4),
                "status_max_s": round(took[-1], 4),
                "failed": failed,
                "connects_per_s_per_loop": rates,
            }
        )
    )


if __name__ == "__main__":
    main()
