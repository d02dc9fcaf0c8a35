"""Prints 300 MB from forward: past the worker's 256 MB log limit. The write fails (EFBIG)
and the verdict must say why, not crash or hang the evaluator (fault_stdout.py is the
other side: a few megabytes of output are fine)."""
import sys

import torch
import torch.nn as nn

EXPECT = "runtime_error/output_flood"
TASK = "gelu"


class ModelNew(nn.Module):
    def forward(self, x):
        chunk = "x" * (1 << 20)
        for _ in range(300):
            sys.stdout.write(chunk)
        sys.stdout.flush()
        return torch.nn.functional.gelu(x)
