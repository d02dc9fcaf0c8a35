"""Slows down the operator the reference uses, so the reference looks slow."""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

_gelu = F.gelu


def _slow_gelu(x, *a, **k):
    time.sleep(0.01)
    return _gelu(x, *a, **k)


F.gelu = _slow_gelu


class ModelNew(nn.Module):
    def forward(self, x):
        return _gelu(x)
