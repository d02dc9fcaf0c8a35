"""Shrinks the task's own size constant in the already-loaded task module, so the inputs
the harness draws next are tiny."""
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/problem_size_changed"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

for mod in list(sys.modules.values()):
    if getattr(mod, "batch_size", None) and hasattr(mod, "get_inputs") and hasattr(mod, "Model"):
        mod.batch_size = 1


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
