"""A thread that poses as a library's: the harness lets threads torch starts run on, and tells
them by a mark on the thread object, which the candidate sets on its own thread; the thread
finishes the output after forward returned. Stopped by the static check (the mark's name)."""
import threading

import torch
import torch.nn as nn

EXPECT = "rejected/static_check"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"require_kernel": True, "static_check": True}


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.zeros_like(x)
        t = threading.Thread(target=lambda: y.copy_(torch.nn.functional.gelu(x)))
        t._started_by_library = True
        t.start()
        return y
