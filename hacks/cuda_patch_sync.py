"""Replaces torch.cuda.synchronize with a no-op, so a harness calling it stops the clock
while the GPU is still busy."""
import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

torch.cuda.synchronize = lambda device=None: None


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
