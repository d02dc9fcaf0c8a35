"""Slows the reference by the thread count: torch.set_num_threads(1) whenever the reference's
forward starts (a forward pre-hook on its module class is watched; here the candidate's own
forward drops the count on its way out, so the reference's next call runs on one thread, and
raises it again on its next entry). No global flag differs at the harness's checkpoints.
Stopped by the static check."""
import torch
import torch.nn as nn

EXPECT = "rejected/static_check"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"require_kernel": True, "static_check": True}

_threads = torch.get_num_threads()


class ModelNew(nn.Module):
    def forward(self, x):
        torch.set_num_threads(_threads)
        y = torch.nn.functional.gelu(x)
        torch.set_num_threads(1)  # whatever runs next, the reference included, gets one thread
        return y
