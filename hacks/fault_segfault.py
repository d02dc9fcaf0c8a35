"""Dereferences a null pointer inside forward."""
import ctypes

import torch.nn as nn

EXPECT = "runtime_error/crash"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too


class ModelNew(nn.Module):
    def forward(self, x):
        return ctypes.c_int64.from_address(16).value
