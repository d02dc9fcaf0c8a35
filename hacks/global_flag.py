"""Takes the reference's threads away: with one thread eager PyTorch is slower."""
import torch
import torch.nn as nn

EXPECT = "rejected/global_flag"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.set_num_threads(1)

    def forward(self, x):
        return torch.nn.functional.gelu(x)
