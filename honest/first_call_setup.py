"""A one-time setup in its first forward (as a kernel built on first use, or cuDNN's autotuning
of a 3-D convolution, takes seconds once): 2 s, under a 1 s call deadline. The first call of
a candidate gets three times the deadline, so this passes; a hang in the first call still
ends after 3 s here (15 s with the default deadline)."""
import time

import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "gelu"
OPTIONS = {"call_timeout": 1.0}

_ready = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _ready:
            time.sleep(2.0)
            _ready.append(True)
        return torch.nn.functional.gelu(x)
