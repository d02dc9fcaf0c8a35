"""Never returns from forward."""
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"call_timeout": 0.5, "call_timeout_factor": 1.0, "run_timeout": 30.0}


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
