"""A profile hook that busy-waits whenever the reference's forward is entered: sys.setprofile
runs code beside every call, so the reference's times grow while outputs stay right (a
patch-free slowdown). Rejected: trace and profile hooks are checked after each phase."""
import sys
import time

import torch
import torch.nn as nn

EXPECT = "rejected/interpreter_hook"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too


def _hook(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "forward" and "Model" == type(frame.f_locals.get("self")).__name__:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.001:
            pass


sys.setprofile(_hook)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
