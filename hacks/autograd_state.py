"""Turns autograd back on, in anomaly mode, at import: every op of the reference (an MLP with
weights) then records a graph and a stack trace, a cost per op, while its own forward runs
under torch.no_grad(). The same computation got ok 2.01x on the CPU VM. Grad and anomaly
mode are now flags of the harness's table (guards.py): what the candidate sets applies to its
own calls only, so it earns nothing."""
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "mlp"
MAX_SPEEDUP = 1.5
torch.set_grad_enabled(True)
torch.autograd.set_detect_anomaly(True)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        with torch.no_grad():
            return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))
