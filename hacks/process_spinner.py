"""A child process that spins on the worker's cores whenever the candidate is not the one
running: the reference, timed in between, runs on fewer cores, so the candidate (the same
GELU) looks faster. A shared page (a file both map) says when the candidate runs. The child
is a fresh interpreter whose command line names torch's compile workers, which a job may
leave running, so its end does not give it away (left_process). The thread watch lists no
thread of its own, and the load probe sees another process's load: it measures such a round
again, then keeps it, flagged `disturbed`, speedup and all. Stopped by the CPU time of the
processes the job started, over the timing (timing.ChildWatch)."""
import mmap
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn

EXPECT = "rejected/child_process"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too: subprocess
NEEDS = ("processes",)
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_memory_gb": 2.0}  # it never goes idle: the wait before timing is this long, not 30 s
SPIN = """
import mmap, sys, time
f = open(sys.argv[1], "r+b")
flag = mmap.mmap(f.fileno(), 1)
while True:
    if flag[0]:
        time.sleep(0.0002)
    else:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.002 and not flag[0]:
            pass
"""
path = os.path.join(tempfile.mkdtemp(), "flag")
with open(path, "wb") as f:
    f.write(b"\0")
flag = mmap.mmap(os.open(path, os.O_RDWR), 1)
child = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not child:  # in the first call: a job that only imports the file (a build) starts none
            child.append(subprocess.Popen([sys.executable, "-c", SPIN, path, "compile_worker"]))
        flag[0] = 1
        try:
            return torch.nn.functional.gelu(x)
        finally:
            flag[0] = 0
