"""How long the dashboard's runs page takes on a store of many runs, and how large it is.

Each case is a SQLite store of N runs (`tests/support/many_runs.py`, one row that does not read as a run among
them), served by `wattwise dashboard` in a process of its own as a user starts it. Given: the wall time of
`GET /` (the median of 5, after one to warm up) and the page's size; with Debian's chromium and its driver
installed, the time headless Chromium takes to load the page.

    python benchmarks/dashboard_many_runs.py               # 2,500 and 20,000 runs
    python benchmarks/dashboard_many_runs.py --runs 20000  # one case
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _browser import load_s  # noqa: E402

from tests.support.many_runs import write_many_runs  # noqa: E402

TOKEN = "benchmark-token-0123456789ab"


def get_s(url: str) -> tuple[float, int]:
    """Wall time of one GET of `url` with the token, and the page's size in bytes."""
    request = urllib.request.Request(url, headers={"Authorization": f"Token {TOKEN}"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        size = len(response.read())
    return time.perf_counter() - start, size


def browser_s(url: str) -> float | None:
    """Seconds until headless Chromium has loaded `url`; None without chromium."""
    return load_s(f"{url}?token={TOKEN}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, action="append", help="runs of a case (default 2,500 and 20,000)")
    args = parser.parse_args()
    print("| runs | GET / (s, median of 5) | page (kB) | loaded in Chromium (s) |")
    print("|---:|---:|---:|---:|")
    for count in args.runs or (2_500, 20_000):
        with tempfile.TemporaryDirectory() as scratch:
            store = Path(scratch) / "jobs.sqlite"
            write_many_runs(store, count, hostile=True)
            env = {**os.environ, "WATTWISE_HOME": scratch}
            command = [sys.executable, "-m", "wattwise", "dashboard", "--port", "0", "--store", str(store)]
            server = subprocess.Popen([*command, "--token", TOKEN], stdout=subprocess.PIPE, text=True, env=env)
            try:
                assert server.stdout is not None
                url = server.stdout.readline().split()[3].removesuffix(f"?token={TOKEN}")
                get_s(url)
                times, size = zip(*(get_s(url) for _ in range(5)), strict=True)
                loaded_s = browser_s(url)
            finally:
                server.terminate()
                server.wait(timeout=30)
            loaded = "-" if loaded_s is None else f"{loaded_s:.2f}"
            print(f"| {count:,} | {statistics.median(times):.2f} | {size[0] / 1e3:.0f} | {loaded} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
