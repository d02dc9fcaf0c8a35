"""Replaces an attribute of the harness object itself: its clock, found by walking the caller
frames at import. A clock that runs slow while the candidate is timed makes it look fast; the
module's and the class's functions are untouched. Rejected: the harness instance is in the
snapshot."""
import sys
import time

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

f = sys._getframe()
while f is not None:
    h = f.f_locals.get("self")
    if type(h).__name__ == "Harness":
        real = h.clock
        h.clock = lambda: real() * 0.5
        break
    f = f.f_back


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
