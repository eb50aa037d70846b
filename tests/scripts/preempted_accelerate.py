"""A plain Accelerate training loop that is preempted: SIGTERM reaches it after optimizer step 6.

`python preempted_accelerate.py MARKER_DIR own|none`: with `own` the script has its own SIGTERM handler (it
writes `MARKER_DIR/handler` and asks the loop to stop; the loop ends, `end_training` runs, exit 0); with
`none` SIGTERM's default action ends the process (exit 143). Run by
tests/integration/accelerate_energy/test_preemption.py with and without `ACCELERATE_ENERGY=1`.
"""

import os
import signal
import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.test_utils.training import RegressionModel

import accelerate_energy

marker, handling = Path(sys.argv[1]), sys.argv[2]
stop = False


def on_sigterm(signum, frame):
    global stop
    (marker / "handler").write_text(signal.Signals(signum).name)
    stop = True


if handling == "own":
    signal.signal(signal.SIGTERM, on_sigterm)
torch.set_num_threads(1)
accelerator = accelerate_energy.attach(Accelerator(cpu=True))
model = RegressionModel(a=1, b=1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
x = torch.randn(4)
for step in range(1, 200):
    accelerator.backward(torch.nn.functional.mse_loss(model(x), 2 * x + 3))
    optimizer.step()
    optimizer.zero_grad()
    if step == 6:
        os.kill(os.getpid(), signal.SIGTERM)
    if stop:
        break
accelerator.end_training()
print(f"stopped after step {step}")
