"""Slows the reference down by patching a method of a torch class it calls: nn.Linear.forward
busy-waits, then does its work. The candidate's own forward does not use nn.Linear, so only
the reference pays (only nn.Module itself used to be watched). Rejected: the classes the
reference's modules are made of are in the snapshot."""
import time

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "linear_relu"
STATIC = True  # the static check (kernels/static.py) finds it too

_forward = nn.Linear.forward


def _slow(self, x):
    t = time.perf_counter()
    while time.perf_counter() - t < 0.002:
        pass
    return _forward(self, x)


nn.Linear.forward = _slow


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        bound = 1 / in_features ** 0.5
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return torch.relu(torch.addmm(self.bias, x, self.weight.t()))
