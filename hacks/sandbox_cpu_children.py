"""Correct, but burns CPU in 8 child processes and waits for them. A CPU-time limit per
process (RLIMIT_CPU) gives each child its own 6 s, so the job would go on for 48 s of CPU
and pass; the limit is the job's, all its processes together (its control group), so the
job is stopped near 6 s: runtime_error/cpu_time."""
import os

import torch
import torch.nn as nn

EXPECT = "runtime_error/cpu_time"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"cpu_seconds": 6.0, "call_timeout": 60.0}  # room for the honest check after it (about 3 s)
NEEDS = ("job CPU time",)


class ModelNew(nn.Module):
    def forward(self, x):
        kids = []
        for _ in range(8):
            pid = os.fork()
            if pid == 0:
                while True:
                    pass
            kids.append(pid)
        for pid in kids:
            os.waitpid(pid, 0)
        return torch.nn.functional.gelu(x)
