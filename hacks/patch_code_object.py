"""Replaces the code of the evaluator's timing routine, not the function: timing.run_timing
keeps its identity (an identity check of the module's functions passes) while its __code__
now reports a 100x speedup. Rejected: the snapshot keeps each function's code object too."""
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too


def _fake(h, ref, new):
    return 1.0, 0.01, 0.0


timing = sys.modules.get("kernels.timing")
if timing is not None:
    timing.run_timing.__code__ = _fake.__code__


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
