"""Ends the multiprocessing forkserver the workers are forked from: every worker inherits
the read end of the forkserver's "alive" pipe, which it can reopen for writing through
/proc/self/fd; one byte there and the forkserver stops ("Not at EOF?"). Multiprocessing then
starts a new one from the Evaluator's process, with the Evaluator's whole environment, so the
next job can read the user's keys; this job's own exit code is lost on the way (before:
`runtime_error/exit`, and the next job saw the key). Contained (the worker closes the pipe
before the job, and the Evaluator restarts a missing forkserver with the minimal
environment): nothing happens, and the correct output. The test checks the forkserver
outlives the run."""
import os
from multiprocessing import forkserver

import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too

_fd = forkserver._forkserver._forkserver_alive_fd
if _fd is not None:
    try:
        w = os.open(f"/proc/self/fd/{_fd}", os.O_WRONLY | os.O_NONBLOCK)
        os.write(w, b"x")
        os.close(w)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)
