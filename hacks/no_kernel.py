"""Plain PyTorch: no compiled kernel at all, which a task may forbid (require_kernel)."""
import torch
import torch.nn as nn

EXPECT = "rejected/no_kernel"
TASK = "gelu"
OPTIONS = {"require_kernel": True, "static_check": True}


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
