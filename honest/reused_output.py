"""Writes every result into one preallocated buffer and returns it (as a CUDA graph replay
does). KernelBench accepts it; so do we, flagged reused_output."""
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "ok"
TASK = "gelu"
FLAGS = ["reused_output"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        self.out.copy_(F.gelu(x))
        return self.out
