"""Correct, but leaves processes behind: a child that loops, and a `sleep 9871` detached in
a session of its own by a double fork, as a candidate keeping a miner or a listener alive
would. Every process a job starts must be gone when it ends, and the verdict must say one
was left (the test also checks no `sleep 9871` survives)."""
import os
import subprocess

import torch
import torch.nn as nn

EXPECT = "runtime_error/left_process"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
NEEDS = ("processes",)


class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            subprocess.Popen(["sleep", "9871"], start_new_session=True, stdout=subprocess.DEVNULL)
            if os.fork() == 0:
                try:
                    os.setsid()
                    if os.fork() == 0:
                        while True:
                            pass
                finally:
                    os._exit(0)
        return torch.nn.functional.gelu(x)
