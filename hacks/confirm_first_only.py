"""A trick aimed at the first timing only: in the run job that first times it, the candidate
writes a made-up success (ok 42x) on its result pipe and exits (hacks/trust_forged_run.py: a
hole the static check closes; off here); in the fresh worker of the second measurement it
behaves, and computes GELU as the reference does. By default the forged success names no
reference round the reference timer measured: rejected (protocol). Paired, the second timer
finds about 1x: the two measurements disagree far beyond their spreads, rejected as
unconfirmed. Any trick that works only on the first timer's process (its clock, its phases,
its messages) meets the same end."""
import json
import os
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/protocol"  # a success with no reference round the reference timer measured
EXPECT_PAIRED = "rejected/unconfirmed"  # --reference_timing=paired: caught by the second measurement
EXPECT_APART = "ok"  # apart the Evaluator takes the reference's time from before this loaded: the forged 42 ms is ignored, the forged 1 ms is no faster than GELU
MAX_SPEEDUP_APART = 1.5
TASK = "gelu"
STATIC = True

f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None and f.f_locals.get("kind") == "run" and not f.f_locals["job"].get("confirm"):
    data = json.dumps(dict(status="ok", ref_ms=42.0, new_ms=1.0, spread=0.0)).encode()
    os.write(f.f_locals["conn"].fileno(), len(data).to_bytes(4, "big") + data)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
