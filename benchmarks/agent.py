"""Round trips to the node agent over its Unix socket: set-limit latency, status latency, requests/s.

    python benchmarks/agent.py [--requests 2000] [--workers 16]

Starts `wattwise agent serve --backend simulated` on a temp socket and state dir, then times, from
this process: a set-power-limit round trip (the first one takes the lease and journals the originals;
the others change the limit only), a status call, and status requests per second from `--workers`
threads. Prints one JSON object; the agent restores the GPU when this process ends.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wattwise.devices import DeviceError
from wattwise.devices.agent import AgentClient


def start_agent(folder: Path, gid: int | None = None) -> tuple[subprocess.Popen[bytes], AgentClient]:
    """A node agent on simulated GPUs serving `folder/agent.sock` (to group `gid` when given), once it answers."""
    sock = folder / "agent.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wattwise",
            "agent",
            "serve",
            "--backend",
            "simulated",
            "--socket",
            str(sock),
            *(["--group", str(gid)] if gid is not None else []),
            "--state-dir",
            str(folder / "state"),
            "--simulated-dir",
            str(folder / "sim"),
        ],
        stderr=subprocess.DEVNULL,
    )
    client = AgentClient(sock)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client.status()
            return proc, client
        except DeviceError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the agent did not start within 60 s")


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": statistics.median(ordered) * 1e3, "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1e3}


def timed(call: object, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, client = start_agent(Path(tmp))
        try:
            first = timed(lambda: client.set_power_limit(0, 200.0, "bench"), 1)[0]
            limits = iter([250.0, 200.0] * args.requests)
            set_limit = timed(lambda: client.set_power_limit(0, next(limits), "bench"), args.requests // 4)
            status = timed(client.status, args.requests // 4)
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=args.workers) as pool:
                list(pool.map(lambda _: client.status(), range(args.requests)))
            rate = args.requests / (time.perf_counter() - start)
            client.release(0)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    print(
        json.dumps(
            {
                "first_set_limit_ms (lease + journal)": first * 1e3,
                "set_limit": percentiles_ms(set_limit),
                "status": percentiles_ms(status),
                f"status_requests_per_s ({args.workers} threads)": rate,
                "cpus": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
