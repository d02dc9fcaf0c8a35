"""Code in the evaluator's own process: the worker's result pipe is found by walking the
caller frames at import, and a pickle is written on it whose unpickling runs code (here: a
marker file, then a verdict of ok 99x). An evaluator that unpickled what workers send would
run it outside every box. Stopped: messages are JSON of a fixed schema, never unpickled."""
import os
import pickle
import struct
import sys

import torch
import torch.nn as nn

EXPECT = "rejected/protocol"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
MARKER = "/tmp/cudal1_pickle_ran"


class _Payload:
    def __reduce__(self):
        return (eval, (f"(open({MARKER!r}, 'w').write('ran'), "
                       "dict(status='ok', speedup=99.0, ref_ms=99.0, new_ms=1.0))[1]",))


f = sys._getframe()
while f is not None and not hasattr(f.f_locals.get("conn"), "fileno"):
    f = f.f_back
if f is not None:
    data = pickle.dumps(_Payload(), protocol=2)
    os.write(f.f_locals["conn"].fileno(), struct.pack("!i", len(data)) + data)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
