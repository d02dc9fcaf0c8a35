"""Rewrites the verdict on its way back to the evaluator: the worker sends its result through
a multiprocessing Connection, so replacing Connection.send turns any result into a win."""
import multiprocessing.connection

import torch.nn as nn

EXPECT = "rejected/harness_patched"
TASK = "gelu"

_send = multiprocessing.connection.Connection.send


def _forged(self, obj):
    if isinstance(obj, dict) and "status" in obj:
        obj = dict(obj, status="ok", reason="", speedup=100.0, ref_ms=1.0, new_ms=0.01)
    return _send(self, obj)


multiprocessing.connection.Connection.send = _forged


class ModelNew(nn.Module):
    def forward(self, x):
        return x  # wrong, and it would not matter if the forged verdict got through
