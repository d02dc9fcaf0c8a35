"""Correct, but leaves processes behind: a `sleep 9871` in a session of its own, and a child
that waits, detached by a double fork, as a candidate keeping a listener alive would. Every
process a job starts must be gone when it ends, and the verdict must say one was left (the
test also checks no `sleep 9871` survives). (A child that works while the candidate is
timed is stopped sooner: hacks/process_spinner.py.)"""
import os
import subprocess
import time

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
                            time.sleep(1)
                finally:
                    os._exit(0)
        return torch.nn.functional.gelu(x)
