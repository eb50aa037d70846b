"""examples/accelerate_train.py with one process that cannot change its GPU, under `accelerate launch`.

`accelerate launch --multi_gpu --num_processes 2 ranks_differ_accelerate.py HOME FAULT [example arguments]`
with `ACCELERATE_ENERGY=1`: the process of local rank 1 differs as FAULT says (`ranks_differ.py` lists the
faults; HOME is the WATTWISE_HOME), then each process runs the example unchanged. Run by
tests/integration/accelerate_energy/test_ranks_agree.py.
"""

import os
import runpy
import sys
from pathlib import Path

from ranks_differ import make_rank_differ  # beside this script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "accelerate_train.py"

if __name__ == "__main__":
    home, fault = Path(sys.argv[1]), sys.argv[2]
    if os.environ.get("LOCAL_RANK") == "1":
        make_rank_differ(fault, home)
    sys.argv = [str(EXAMPLE), *sys.argv[3:]]
    runpy.run_path(str(EXAMPLE), run_name="__main__")
