"""Short-lived threads threading does not list (started through _thread, as compiled code's
would be). A watcher that uses almost no CPU starts, whenever the candidate is not the one
running, a thread that spins on the worker's cores for a millisecond and ends, then the
next: the reference, timed in between, runs on fewer cores. Each spinner lives one
millisecond, so a list of threads taken now and then (the old watch, once a round) holds at
most one of them, and never the work of those that ended. By default nothing to slow: the
reference is timed in the reference timer's process while this one is stopped (about 1x).
Paired, stopped by the process's CPU time over each timed reference call, less that of the
threads the harness knows (timing.ThreadWatch): the ended threads' work is in it."""
import _thread
import hashlib
import time

import torch
import torch.nn as nn

EXPECT = "ok"  # stopped with its process while the reference is timed in the reference timer: the plain GELU at about 1x
MAX_SPEEDUP = 1.5
EXPECT_PAIRED = "rejected/thread"  # --reference_timing=paired: the reference timed in this process, beside it
EXPECT_APART = "ok"  # apart: the reference is timed before this loads: nothing to slow
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: _thread
BLOCK = bytes(1 << 16)
state = {"mine": False}


def burst(done):  # hashing a large buffer lets go of the interpreter lock, as compiled code would
    t = time.perf_counter()
    while time.perf_counter() - t < 0.001:
        hashlib.sha256(BLOCK).digest()
    done.release()


def watcher():
    while True:
        if state["mine"]:
            time.sleep(0.0001)
            continue
        done = _thread.allocate_lock()
        done.acquire()
        _thread.start_new_thread(burst, (done,))
        done.acquire()  # sleeps until the burst has ended


_thread.start_new_thread(watcher, ())


class ModelNew(nn.Module):
    def forward(self, x):
        state["mine"] = True
        try:
            return torch.nn.functional.gelu(x)
        finally:
            state["mine"] = False
