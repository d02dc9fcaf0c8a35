"""Stalls the evaluator: a frame header that promises 2000 bytes, then 10, on the result pipe.
An evaluator that read messages with a blocking receive would wait inside it for bytes that
never come, with every deadline unenforced. Stopped: the pipe is read without blocking and a
frame cut short, or one that swallows the harness's own result, is a protocol violation."""
import os
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/protocol"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None:
    os.write(f.f_locals["conn"].fileno(), (2000).to_bytes(4, "big") + b"0123456789")


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
