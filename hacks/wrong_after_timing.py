"""Correct for the first calls (the checks: three per weight seed, two more on other input
distributions with the first), then returns zeros once it has been called often enough to be
in the timing loop (from its eighth call: a slow machine's timing plan may make only a few
calls). The spot checks of timed calls catch it (timing.py); the check after timing would
next."""
import torch
import torch.nn as nn

EXPECT = "rejected/timed_output"
TASK = "gelu"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 7:
            return torch.zeros_like(x)
        return torch.nn.functional.gelu(x)
