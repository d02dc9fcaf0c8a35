"""Passes --require_kernel without a kernel: the count the check reads, kernels.KERNEL_CALLS,
is a Python list the candidate can reach, so forward increments it by hand and calls torch.
Stopped by the static check: a candidate may use the build API of kernels and nothing else."""
import kernels
import torch
import torch.nn as nn

EXPECT = "rejected/static_check"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"require_kernel": True, "static_check": True}


class ModelNew(nn.Module):
    def forward(self, x):
        kernels.KERNEL_CALLS[0] += 1
        return torch.nn.functional.gelu(x)
