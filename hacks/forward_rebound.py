"""After the first call, rebinds forward to return the first result without any work."""
import torch
import torch.nn as nn

EXPECT = "rejected/forward_rebound|cached_output"
TASK = "gelu"


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.nn.functional.gelu(x)
        self.forward = lambda x: y
        return y
