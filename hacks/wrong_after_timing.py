"""Counts its calls: right for as many as the checks make on one model (each weight seed
builds its own; the first seed's, which timing uses, gets three: the task's input sets,
check_inputs + 1), then returns zeros, so every timed call is wrong. The spot checks of
timed calls catch it (timing.py), whatever the timing plan; the check after timing would
next. (Wrong only from a later call, it met the check after timing first whenever a loaded
machine's plan made few timed calls and the spots fell on the right ones.)"""
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
        if self.calls > 3:
            return torch.zeros_like(x)
        return torch.nn.functional.gelu(x)
