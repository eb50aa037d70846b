"""How long `wattwise report --html` (and `--plot`) takes on a long run, by the number of pauses it shades.

Each case is an eight-day simulated two-GPU run written through the record's writers
(`tests/support/long_run.py`: 100,000 power samples per device, a logging window a minute, validation and
checkpoint pauses), reported in a process of its own as a user runs it. With Debian's chromium and its
driver installed, the page is also opened in headless Chromium and the time until its charts are drawn
is given.

    python benchmarks/report_long_run.py                 # 100, 200, 400 and 2,000 pauses
    python benchmarks/report_long_run.py --pauses 400    # one case
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _browser import load_s  # noqa: E402

from tests.support.long_run import write_long_run  # noqa: E402


def report_s(run: Path, *flags: str) -> float:
    """Wall time of `wattwise report RUN FLAGS` in a process of its own."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "wattwise", "report", str(run), *flags], check=True, capture_output=True)
    return time.perf_counter() - start


#: The page has loaded and Plotly has drawn every chart on it.
CHARTS_DRAWN_JS = (
    "return document.readyState === 'complete' && "
    "Array.from(document.querySelectorAll('.plotly-graph-div')).every(d => d._fullLayout)"
)


def browser_s(page: Path) -> float | None:
    """Seconds until headless Chromium has drawn every chart of `page`; None without chromium."""
    return load_s(page.as_uri(), CHARTS_DRAWN_JS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pauses", type=int, action="append", help="pauses of a case (default 100, 200, 400, 2000)")
    parser.add_argument("--days", type=float, default=8.0, help="length of the run in days (default %(default)s)")
    args = parser.parse_args()
    print("| pauses | report --html (s) | page (MB) | drawn in Chromium (s) | report --plot (s) |")
    print("|---:|---:|---:|---:|---:|")
    for pauses in args.pauses or (100, 200, 400, 2000):
        with tempfile.TemporaryDirectory() as scratch:
            run = write_long_run(Path(scratch) / "run", days=args.days, pauses=pauses)
            page = Path(scratch) / "page.html"
            html_s = report_s(run, "--html", str(page))
            drawn_s = browser_s(page)
            plot_s = report_s(run, "--plot", str(Path(scratch) / "plots"))
            drawn = "-" if drawn_s is None else f"{drawn_s:.2f}"
            size_mb = page.stat().st_size / 1e6
            print(f"| {pauses:,} | {html_s:.2f} | {size_mb:.1f} | {drawn} | {plot_s:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
