"""Crashes the evaluator: a well-formed frame holding JSON nested 100,000 deep on the result
pipe. Python's JSON reader raises RecursionError on it, not the ValueError of malformed JSON,
and an evaluator that caught only the latter would end the whole evaluation with it (a
training run too). Stopped: any frame that cannot be read is a protocol violation."""
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
    data = b"[" * 100000 + b"]" * 100000
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
