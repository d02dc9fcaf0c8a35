"""Caches the first result for each input shape and replays it."""
import torch
import torch.nn as nn

EXPECT = "rejected/cached_output"
TASK = "gelu"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        if x.shape not in self.cache:
            self.cache[x.shape] = torch.nn.functional.gelu(x)
        return self.cache[x.shape].clone()
