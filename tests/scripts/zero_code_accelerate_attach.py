"""An Accelerate script that keeps its explicit `attach(...)` line, with its own settings (argv[1]: its
output folder), while the flag is on: the script's settings win and nothing is attached twice."""

import sys

import torch
from accelerate import Accelerator

import accelerate_energy
from accelerate_energy import EnergyPlugin

accelerator = accelerate_energy.attach(Accelerator(cpu=True), EnergyPlugin(enabled=True, output_dir=sys.argv[1]))
handle = accelerate_energy.energy(accelerator)
accelerate_energy.attach(accelerator)  # a second line changes nothing
assert accelerate_energy.energy(accelerator) is handle
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for _ in range(5):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
accelerator.end_training()
print(f"output_dir {handle.config.output_dir}")
