"""Correct, but keeps 6 GB of host memory in 32 files of shared memory (/dev/shm) in a job allowed
2 GB (job_memory_gb). A tmpfs file's pages belong to no process, so a watch of the job's
processes' memory does not see them, and many jobs each holding half the machine this way
would leave the kernel's out-of-memory killer only the trainer beside them to kill. Where the
kernel enforces the limit (a memory control group), the pages are charged to the job; where
the evaluator watches the job instead, it counts the job's own /dev/shm and /tmp too:
runtime_error/memory_limit. It writes while it is built, where only the job's deadline
applies (sandbox_memory_limit.py says why)."""
import os

import torch
import torch.nn as nn

EXPECT = "runtime_error/memory_limit"
TASK = "gelu"
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_memory_gb": 2.0}
NEEDS = ("job memory",)
STATIC = True  # the static check (kernels/static.py) finds it too

CHUNK = b"\1" * (64 << 20)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(32):  # files under the 256 MB a file may grow to (output_flood)
            fd = os.open(f"/dev/shm/hoard-{os.getpid()}-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            for _ in range(3):
                os.write(fd, CHUNK)
            os.close(fd)

    def forward(self, x):
        return torch.nn.functional.gelu(x)
