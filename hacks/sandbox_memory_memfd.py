"""Correct, but keeps 6 GB of host memory in 32 anonymous memory files (memfd_create) in a job
allowed 2 GB (job_memory_gb), written through the file, never mapped: its pages are in no
process's resident set, and in no folder. Where the evaluator watches the job's memory (no
memory control group), it counts the memory files the job's processes hold open too:
runtime_error/memory_limit."""
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
    held = []

    def __init__(self):
        super().__init__()
        for _ in range(32):  # files under the 256 MB a file may grow to (output_flood)
            fd = os.memfd_create("hoard")
            for _ in range(3):
                os.write(fd, CHUNK)
            ModelNew.held.append(fd)  # open as long as the job lives

    def forward(self, x):
        return torch.nn.functional.gelu(x)
