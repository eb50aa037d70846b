"""examples/accelerate_train.py with one process that cannot change its GPU, under `accelerate launch`.

`accelerate launch --multi_gpu --num_processes 2 ranks_differ_accelerate.py HOME OUTPUT_DIR FAULT[,FAULT...]
[example arguments]` with `ACCELERATE_ENERGY=1`: for each FAULT (`rank_faults.py` lists them), one after the
other in the same two processes, the process of local rank 1 differs as FAULT says, then each process runs
the example unchanged, with its own simulated GPUs (HOME/FAULT/simulated) and output folder
(OUTPUT_DIR/FAULT). The example's `end_training()` would end the process group that the next run shares, so
it is ended once, after the last. Rank 0 writes `--- FAULT` to stderr before each run. Run by
tests/integration/accelerate_energy/test_ranks_agree.py.
"""

import os
import runpy
import sys
from pathlib import Path

from accelerate.state import PartialState
from rank_faults import make_rank_differ  # beside this script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "accelerate_train.py"

if __name__ == "__main__":
    home, out, faults, example_args = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:]
    rank1 = os.environ.get("LOCAL_RANK") == "1"
    overrides = os.environ.get("ACCELERATE_ENERGY_OVERRIDES", "")
    destroy_process_group = PartialState.destroy_process_group
    PartialState.destroy_process_group = lambda self, group=None: None  # type: ignore[method-assign]
    for fault in faults:
        if not rank1:
            print(f"--- {fault}", file=sys.stderr, flush=True)
        os.environ["ACCELERATE_ENERGY_OUTPUT_DIR"] = str(out / fault)
        state_dir = home / fault / "simulated"
        os.environ["ACCELERATE_ENERGY_OVERRIDES"] = f"{overrides} devices.simulated.state_dir={state_dir}"
        undo = make_rank_differ(fault, home / fault) if rank1 else (lambda: None)
        sys.argv = [str(EXAMPLE), *example_args]
        try:
            runpy.run_path(str(EXAMPLE), run_name="__main__")
        finally:
            undo()
        print(f"{fault} rank {os.environ.get('RANK')} done", flush=True)
    destroy_process_group(PartialState())
