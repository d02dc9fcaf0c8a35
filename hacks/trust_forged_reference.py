"""--reference_timing=apart takes the reference's time from one message the harness sends
before the candidate loads, and never from the result. At import, this candidate finds the
worker's channel (caller frames) and tells a reference time of its own, 1000 ms, hoping the
Evaluator takes it for the reference's (and, with reference_retime, for the task's next
candidates too); its forward is the reference's own GELU. The harness's message came first:
a second one, or one from a job that was given the time, is a protocol violation."""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "rejected/protocol"
TASK = "gelu"
OPTIONS = {"reference_timing": "apart", "reference_retime": 60.0}
STATIC = True  # the static check (kernels/static.py) finds it too: frames

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "run":
    data = json.dumps(["reference", [1000.0, 0.0, False]]).encode()
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)


class ModelNew(nn.Module):
    def forward(self, x):
        return F.gelu(x)
