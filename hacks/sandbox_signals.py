"""Signals beyond the job: kill(pid, 0) on the worker's parent (the forkserver), its parent
(the evaluator) and every other process; SIGKILL on a sibling worker spoils an honest
candidate's verdict. Any signal getting through: a wrong output. Contained: Landlock scopes
signals to the job's own processes (Linux 6.12 and later)."""
import os

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("signals",)

REACHED = []
mine = {os.getpid()}
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) not in mine:
        try:
            os.kill(int(name), 0)  # 0: permission checked, nothing sent
            REACHED.append(int(name))
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1 if REACHED else y
