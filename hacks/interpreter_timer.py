"""An interval timer whose SIGALRM handler busy-waits when the interrupted frame belongs to the
reference: a slowdown with no patched function and no thread. Rejected: the system-call filter
refuses the handler and the timer (kernels/seccomp.py); where it is not installed, signal
handlers and interval timers are checked after each phase."""
import signal
import time

import torch
import torch.nn as nn

EXPECT = "rejected/system_call|interpreter_hook"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too


def _handler(sig, frame):
    while frame is not None:
        if type(frame.f_locals.get("self")).__name__ == "Model":
            t = time.perf_counter()
            while time.perf_counter() - t < 0.0005:
                pass
            return
        frame = frame.f_back


signal.signal(signal.SIGALRM, _handler)
signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
