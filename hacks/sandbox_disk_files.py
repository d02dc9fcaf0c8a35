"""Correct, but creates 50,000 empty files in its work folder, in a job allowed
20,000 (job_files): each costs the disk an inode and some 256 bytes of writes, so a job can
use up the disk's inodes within its byte limit (job_disk_gb) and deadline, and every build
beside it fails; what it leaves in its program's part of the build cache would stay. The
evaluator counts the files and folders in the job's work folder and its part of the build
cache: runtime_error/disk_limit. It creates them while it is built, where only the job's
deadline applies."""
import os

import torch
import torch.nn as nn

EXPECT = "runtime_error/disk_limit"
TASK = "gelu"
OPTIONS = {"settle_seconds": 3.0, "confirm_speedup": 0.0, "job_files": 20000}
STATIC = True  # the static check (kernels/static.py) finds it too


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        os.makedirs("many", exist_ok=True)
        for i in range(50000):  # within the constructor's deadline (15 s) on a slow VM
            os.close(os.open(f"many/{i}", os.O_CREAT | os.O_WRONLY, 0o600))

    def forward(self, x):
        return torch.nn.functional.gelu(x)
