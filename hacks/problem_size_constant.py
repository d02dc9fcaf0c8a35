"""Ships its own, smaller problem size: a harness that took get_inputs from the solution
file would time a tenth of the work."""
import torch
import torch.nn as nn

EXPECT = "rejected/problem_size_changed"
TASK = "gelu"

batch_size, dim = 16, 4096


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]
