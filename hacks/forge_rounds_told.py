"""Tells the Evaluator rounds of its own: from inside its timed calls it writes a well-formed
("newround", 0.0001) on the run job's channel (found by walking the frames at import), as if
the harness had timed a round of the candidate at a tenth of a microsecond. The Evaluator
takes a candidate's round only while the job holds the device, and never more of them than
the reference timer's rounds: the second one it writes in a round is rejected (protocol).
Were they taken, the median of the rounds would be its own number."""
import json
import os
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/protocol"  # more rounds of its own than the timer's (paired and apart: none is asked for)
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: frames, raw descriptors
f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
FD = f.f_locals["conn"].fileno() if f is not None and f.f_locals.get("kind") == "run" else None
FRAME = json.dumps(["newround", 0.0001]).encode()


def _timing():
    g = sys._getframe(1)
    while g is not None:
        if g.f_code.co_name == "run_timing":
            return True
        g = g.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if FD is not None and _timing():
            os.write(FD, len(FRAME).to_bytes(4, "big") + FRAME)
        return torch.nn.functional.gelu(x)
