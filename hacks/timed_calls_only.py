"""Tells the timing from the checks and answers wrongly, and cheaply, in every timed call,
while it behaves in the checks and in the check after timing. Here it finds the timing
routine on its call stack (the static check rejects that; off here); the rhythm of its calls,
or the cores a GPU worker times on, would tell it as well. With the second measurement off
(it would catch this at 1.5x and up), the layer that stops it is the spot check: a few timed
calls, drawn at random as they happen, keep their inputs and output, and the reference must
agree with them afterwards. Before that layer, on the CPU: ok 1.27x, under the 1.5x from which
the second timer would have looked again."""
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/timed_output"
TASK = "gelu"
STATIC = True
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_memory_gb": 2.0}


def _timed():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "_timed":
            return True
        f = f.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if _timed():
            return x * 0.5  # no GELU at all
        return torch.nn.functional.gelu(x)
