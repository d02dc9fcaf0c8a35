"""Correct, but takes 6 GB of host memory (written, so the pages are real) in a job allowed
2 GB (job_memory_gb). The kernel's out-of-memory killer ends the job inside its own control
group, not the evaluator or the trainer beside it, and the verdict names the limit:
runtime_error/memory_limit. It hoards while it is built, where only the job's deadline
applies: in forward, on a slow 2-core VM, writing the pages can outlast a call's deadline
(5 s), and the verdict would be a timeout instead."""
import torch
import torch.nn as nn

EXPECT = "runtime_error/memory_limit"
TASK = "gelu"
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_memory_gb": 2.0}
NEEDS = ("job memory",)


class ModelNew(nn.Module):
    hoard = []

    def __init__(self):
        super().__init__()
        while len(ModelNew.hoard) < 24:
            ModelNew.hoard.append(b"\1" * (256 << 20))

    def forward(self, x):
        return torch.nn.functional.gelu(x)
