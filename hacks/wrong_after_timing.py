"""Correct for the first calls (the checks: three per weight seed), then returns zeros once it
has been called often enough to be in the timing loop (from its fifth call: a slow machine's
timing plan may make only a few calls)."""
import torch
import torch.nn as nn

EXPECT = "incorrect/mismatch"
TASK = "gelu"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 4:
            return torch.zeros_like(x)
        return torch.nn.functional.gelu(x)
