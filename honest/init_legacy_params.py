"""Creates its parameters the legacy way (torch.Tensor(out, in) then kaiming_uniform_), as
many public solutions do: the same draws as nn.Linear, on the host. Built as KernelBench
builds both programs (seed, construct on the host, move), it gets the reference's weights."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "ok"
TASK = "linear_relu"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.relu(F.linear(x, self.weight, self.bias))
