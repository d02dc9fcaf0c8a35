"""A thread threading does not list (started through _thread, as compiled code's would be)
that spins on the worker's cores while the timing runs and the candidate is not the one
running (it reads the harness's frames: inside run_timing, outside this file), and sleeps
otherwise: the reference, timed in between, runs on fewer cores and behind a busy
interpreter lock, so the candidate (the same GELU) looks faster, and the checks, not slowed,
give nothing away. By default it has nothing to slow: the reference is timed in the reference
timer's process while this one is stopped, and the verdict is the plain GELU's (about 1x).
Paired (the reference timed in this process), stopped by the CPU time such threads use while
the reference is timed (timing.ThreadWatch)."""
import _thread
import os
import sys
import threading
import time

import torch
import torch.nn as nn

EXPECT = "ok"  # stopped with its process while the reference is timed in the reference timer: the plain GELU at about 1x
MAX_SPEEDUP = 1.5
EXPECT_PAIRED = "rejected/thread"  # --reference_timing=paired: the reference timed in this process, beside it
EXPECT_APART = "ok"  # apart: the reference is timed before this loads: nothing to slow
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
MAIN = threading.main_thread().ident


def timing_the_reference():
    f, timed = sys._current_frames().get(MAIN), False
    while f is not None:
        if f.f_code.co_filename == __file__:
            return False  # the candidate's own call
        timed = timed or f.f_code.co_name == "run_timing"
        f = f.f_back
    return timed


def spin():
    while True:
        if timing_the_reference():
            t = time.perf_counter()
            while time.perf_counter() - t < 0.002:
                pass
        else:
            time.sleep(0.0002)


_thread.start_new_thread(spin, ())
os.sched_yield()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
