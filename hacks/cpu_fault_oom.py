"""Asks for eight terabytes of host memory (the worker's address-space limit refuses it)."""
import torch
import torch.nn as nn

EXPECT = "runtime_error/oom"
TASK = "gelu"


class ModelNew(nn.Module):
    def forward(self, x):
        buf = torch.empty(1 << 43, dtype=torch.uint8)
        return buf[: x.numel() * 4].view(torch.float32).view_as(x)
