"""A made-up verdict from the compile job: at import the candidate writes a well-formed
result, ok 42x, on its pipe and exits, while its forward returns zeros. An evaluator that
took a compile job's result as final would record the win. Stopped: a compile job can only
report built or a build failure; anything else is a forgery."""
import json
import os
import sys

import torch
import torch.nn as nn
from torch.utils import cpp_extension  # noqa: F401  code that names a build gets a compile job


EXPECT = "rejected/protocol"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "compile":
    data = json.dumps(dict(status="ok", speedup=42.0, ref_ms=42.0, new_ms=1.0)).encode()
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
