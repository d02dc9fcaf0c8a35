"""Writes every result into one preallocated buffer and returns it (as a CUDA graph replay
does), judged with reject_reused_output: rejected by name."""
import torch
import torch.nn as nn
import torch.nn.functional as F

EXPECT = "rejected/reused_output"
TASK = "gelu"
OPTIONS = {"reject_reused_output": True}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        self.out.copy_(F.gelu(x))
        return self.out
