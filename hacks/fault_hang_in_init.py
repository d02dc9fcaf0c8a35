"""Hangs in its constructor, which, like the import, had no deadline of its own and no pause
point (see fault_hang_at_import.py): each construction now runs under the first call's
deadline (here 3 x 0.5 s), and the job ends there, not at its 30 s."""
import time

import torch
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}
MAX_RUN_S = 10.0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        time.sleep(1000)

    def forward(self, x):
        return torch.nn.functional.gelu(x)
