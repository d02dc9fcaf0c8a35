"""Hangs while it is imported. An import had no deadline of its own, and code that runs long
there reaches no pause point either: on a GPU every other worker's timing waited for it until
the job's deadline (900 s with --config kernelbench). The import now runs under the first
call's deadline (here 3 x 0.5 s): the job ends there, not at its 30 s."""
import time

import torch
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}
MAX_RUN_S = 10.0

time.sleep(1000)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
