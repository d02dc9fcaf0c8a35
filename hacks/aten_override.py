"""Registers its own CPU kernel for aten::addmm, the op nn.Linear runs, through torch.library
at import: the reference's two Linear layers then pay 0.5 ms of Python each, while its own
forward computes the same MLP with matmul and add, which the override leaves alone. Nothing
of Python is replaced (the harness's snapshots see no change): ok 2.44x on the CPU VM
before. Stopped by the dispatcher's own listing of the kernels of aten's ops, taken before
the candidate loads and compared after the checks and after each timing
(guards.dispatch_table)."""
import time

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "mlp"
_lib = torch.library.Library("aten", "IMPL")


def slow_addmm(bias, a, b, beta=1, alpha=1):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.0005:
        pass
    return torch.matmul(a, b).add_(bias)


_lib.impl("addmm", slow_addmm, "CPU")


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = torch.nn.functional.gelu(torch.matmul(x, self.fc1.weight.t()).add_(self.fc1.bias), approximate="tanh")
        return torch.matmul(h, self.fc2.weight.t()).add_(self.fc2.bias)
