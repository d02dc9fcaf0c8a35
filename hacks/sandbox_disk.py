"""Correct, but writes file after file of 200 MB (under the 256 MB one file may grow to) into its
work folder, 4 GB in all, in a job allowed 0.5 GB (job_disk_gb): no per-file limit stops that,
and a candidate that fills the machine's disk breaks every build, result and checkpoint after
it, the trainer's included. The evaluator watches the bytes each job's processes send to
disk (their children's included): runtime_error/disk_limit. Each file is removed once
written, which does not take back what was written. It writes while it is built, where only
the job's deadline applies."""
import os

import torch
import torch.nn as nn

EXPECT = "runtime_error/disk_limit"
TASK = "gelu"
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_disk_gb": 0.5}

CHUNK = b"\1" * (8 << 20)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        for i in range(20):
            name = f"fill-{i}"
            with open(name, "wb") as f:
                for _ in range(25):
                    f.write(CHUNK)
            os.remove(name)

    def forward(self, x):
        return torch.nn.functional.gelu(x)
