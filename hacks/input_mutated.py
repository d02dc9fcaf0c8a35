"""Computes in place in the input's memory to save an allocation."""
import torch
import torch.nn as nn

EXPECT = "rejected/input_mutated"
TASK = "swish_bias"


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        s = torch.sigmoid(x)
        return x.mul_(s).add_(self.bias)
