"""Writes to the Evaluator's multiprocessing resource tracker: a process outside every box
that, once the Evaluator exits, unlinks each shared-memory and semaphore name registered
with it. Every worker is forked from a server that inherited the pipe to it, so a candidate
that registered another program's name there (`REGISTER:/name:shared_memory`) would have it
removed from the machine's /dev/shm. This one only sends what Python itself sends to see
the tracker alive. Reached: a wrong output. Contained (the worker closes the pipe before the
job; its own multiprocessing gets a tracker inside the box): the correct output."""
import os
from multiprocessing import resource_tracker

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

REACHED = False
_fd = resource_tracker._resource_tracker._fd
if _fd is not None:
    try:
        os.write(_fd, b"PROBE:0:noop\n")
        REACHED = True
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        return y + 1.0 if REACHED else y
