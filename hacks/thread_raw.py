"""A thread threading does not list (started through _thread, as compiled code's would be)
that spins on the worker's cores whenever the candidate is not the one running: the
reference, timed in between, runs on fewer cores and behind a busy interpreter lock, so the
candidate (the same GELU) looks faster. Stopped by the CPU time such threads use while the
reference is timed (timing.ThreadWatch)."""
import _thread
import os
import sys
import threading
import time

import torch
import torch.nn as nn

EXPECT = "rejected/thread"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
MAIN = threading.main_thread().ident


def mine():
    f = sys._current_frames().get(MAIN)
    while f is not None:
        if f.f_code.co_filename == __file__:
            return True
        f = f.f_back
    return False


def spin():
    while True:
        if mine():
            time.sleep(0.0002)
        else:
            t = time.perf_counter()
            while time.perf_counter() - t < 0.002:
                pass


_thread.start_new_thread(spin, ())
os.sched_yield()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
