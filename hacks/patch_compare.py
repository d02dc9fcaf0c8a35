"""Replaces the evaluator's output comparison with one that passes anything, then returns
garbage. The workers import it before the candidate, so the candidate can reach it."""
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

checks = sys.modules.get("kernels.correctness")
if checks is not None:
    checks.compare = lambda *args, **kwargs: (0.0, 1e-4)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
