"""Correct, but prints megabytes: the verdict must still be ok."""
import torch
import torch.nn as nn

EXPECT = "ok/"
TASK = "gelu"

print("x" * (8 << 20))


class ModelNew(nn.Module):
    def forward(self, x):
        print("y" * (64 << 10))
        return torch.nn.functional.gelu(x)
