"""Correct, but keeps 1.9 GB of host memory in files of its own /tmp (a tmpfs of the job's, 2
GB at most) in a job allowed 2 GB (job_memory_gb), which its process's own few hundred MB
then take past the limit: tmpfs pages belong to no process. Where the evaluator watches the
job's memory (no memory control group), it counts the job's own /tmp and /dev/shm too:
runtime_error/memory_limit. Where the job has no /tmp of its own, /tmp is read-only to it
and the files go to /dev/shm instead."""
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
        for i in range(10):  # 1.875 GB, in files under the 256 MB a file may grow to (output_flood)
            try:
                fd = os.open(f"/tmp/hoard-{os.getpid()}-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                fd = os.open(f"/dev/shm/hoard-{os.getpid()}-{i}", os.O_WRONLY | os.O_CREAT, 0o600)
            for _ in range(3):
                os.write(fd, CHUNK)
            os.close(fd)

    def forward(self, x):
        return torch.nn.functional.gelu(x)
