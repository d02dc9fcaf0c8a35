"""Replaces the host clock so every interval looks short."""
import time

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

_real = time.perf_counter
_calls = [0]


def _fake():
    _calls[0] += 1
    return _real() / 1000.0


time.perf_counter = _fake


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
