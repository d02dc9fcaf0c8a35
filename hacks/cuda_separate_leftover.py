"""Against --reference_timing=separate on a GPU: the reference's rounds run in another process
while this one is stopped, but work this process has already queued on the device runs on.
A thread threading does not list (started through _thread) watches the harness's main thread;
the moment it waits for a reference round (after the harness synchronized the device, before
the Evaluator stops this process) it queues 30 ms of spinning on a stream of its own. The
reference's calls, in the timer's context, then share the device with it, and the candidate
(the same GELU) would look several times faster. Stopped by the timer's quiet check: before
each round it waits until a tiny synchronized operation takes its usual time (timing.DeviceQuiet)."""
import _thread
import sys
import threading
import time

import torch
import torch.nn as nn

EXPECT = "ok"
MAX_SPEEDUP = 1.5
TASK = "gelu"
OPTIONS = {"reference_timing": "separate"}
STATIC = True  # the static check (kernels/static.py) finds it too: frames, _thread
MAIN = threading.main_thread().ident


def waiting_for_the_reference():
    f = sys._current_frames().get(MAIN)
    names = set()
    while f is not None:
        names.add(f.f_code.co_name)
        f = f.f_back
    return "reference_round" in names and "_next" in names


def launch():
    torch.cuda.set_device(0)
    side = torch.cuda.Stream()
    while True:
        if waiting_for_the_reference():
            with torch.cuda.stream(side):
                torch.cuda._sleep(60_000_000)  # about 30 ms of spinning
            while waiting_for_the_reference():
                time.sleep(0.0005)
        else:
            time.sleep(0.00005)


_thread.start_new_thread(launch, ())


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
