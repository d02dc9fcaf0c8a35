"""Makes CUDA events report a tenth of the real elapsed time."""
import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
