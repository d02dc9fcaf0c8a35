"""Correct, but starts processes without end, a fork bomb held to 300 here so that a machine
without the limit survives the test. With max_processes at 100 the kernel refuses the
processes past it (the candidate even catches the error and goes on), or, where no pids group
can be made (the GPU machines), the evaluator sees more than 100 at its next look and kills the
job; either way the verdict names the limit: runtime_error/process_limit. Every process it did
start is killed with the job."""
import os
import time

import torch
import torch.nn as nn

EXPECT = "runtime_error/process_limit"
TASK = "gelu"
STATIC = True  # the static check (kernels/static.py) finds it too
OPTIONS = {"max_processes": 100}
NEEDS = ("process count",)


class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            for _ in range(300):
                try:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                except OSError:
                    pass
        return torch.nn.functional.gelu(x)
