"""Never returns from forward."""
import torch.nn as nn

EXPECT = "timeout/timeout"
TASK = "gelu"
OPTIONS = {"run_timeout": 20.0}


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
