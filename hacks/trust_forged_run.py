"""A made-up result from the run job itself: at import the candidate finds its result pipe by
walking the caller frames, writes a well-formed success, ok 42x, and exits; its forward
returns zeros. The evaluator cannot tell this frame from the harness's: the worker runs the
candidate in its own process, and everything it says, the candidate can say. The layer that
stops it is the static check (frames, raw descriptors); with it off, as the other hacks run,
it would pass (EVAL.md, "Known limits")."""
import json
import os
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/static_check"
TASK = "gelu"
OPTIONS = {"require_kernel": True, "static_check": True}
STATIC = True

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "run":
    data = json.dumps(dict(status="ok", ref_ms=42.0, new_ms=1.0)).encode()
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
