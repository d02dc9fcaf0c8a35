"""Enters a TorchFunctionMode at import and never leaves it: every torch call of the
reference then runs Python first (here 0.2 ms of it), while its own forward turns the mode
off (torch._C.DisableTorchFunction). The same computation got ok 1.91x and 1.97x on the CPU
VM. torch.set_default_device installs such a mode too. The mode stacks (function and
dispatch) are fixed conditions of the harness: a candidate that leaves one changed is
rejected."""
import time

import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

EXPECT = "rejected/global_flag"
TASK = "mlp"


class Slow(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0002:
            pass
        return func(*args, **(kwargs or {}))


Slow().__enter__()


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        with torch._C.DisableTorchFunction():
            return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))
