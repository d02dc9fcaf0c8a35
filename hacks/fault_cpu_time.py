"""Burns CPU in forward (matrix products on the host, on every core torch uses) past a
6-second CPU-time limit (cpu_seconds), well within the call deadline. The worker is killed
by SIGXCPU and the verdict says so: runtime_error/cpu_time."""
import time

import torch
import torch.nn as nn

EXPECT = "runtime_error/cpu_time"
TASK = "gelu"
OPTIONS = {"cpu_seconds": 6.0, "call_timeout": 60.0}  # the honest check after it (gelu's naive seed) uses about 3


class ModelNew(nn.Module):
    def forward(self, x):
        a = torch.randn(1024, 1024)
        t = time.process_time()
        while time.process_time() - t < 60:
            a = (a @ a).clamp(-1, 1)
        return x
