"""--reference_timing=separate times the reference's rounds in a process of its own when the
harness asks for one, its job holding the device; the Evaluator keeps those times. At import,
this candidate finds the worker's channel (caller frames) and asks for reference rounds of its
own, 4000 calls each, hoping to keep the timer and the device busy while its own job's clock
is stopped, or to have the reference timed at a moment of its choosing; its forward is the
reference's own GELU. A round is served only to a job that holds the device and has none
pending: anything else is a protocol violation."""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "rejected/protocol"
TASK = "gelu"
OPTIONS = {"reference_timing": "separate"}
STATIC = True  # the static check (kernels/static.py) finds it too: frames

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "run":
    data = json.dumps(["refround", [4000, {}]]).encode()
    for _ in range(3):
        os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)


class ModelNew(nn.Module):
    def forward(self, x):
        return F.gelu(x)
