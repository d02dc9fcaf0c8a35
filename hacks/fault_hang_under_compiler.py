"""A hang with a compiler's frame below it: a function wrapped by torch._dynamo.disable spins
for ever, so torch/_dynamo/eval_frame.py is on the main thread's stack at every look. The
harness's watchdog took any compiler frame on the stack for compiling and extended the call's
deadline until the job's (here 30 s). It now looks from the top of the stack down: candidate
code is reached before the compiler's frame, so the call ends at its own deadline (3 x 0.5 s)."""
import torch
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}
MAX_RUN_S = 12.0


@torch._dynamo.disable
def _spin(x):
    while True:
        x = x + 0


class ModelNew(nn.Module):
    def forward(self, x):
        return _spin(x)
