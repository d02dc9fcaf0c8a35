"""Runs the fp32 matmul in bfloat16 and casts back: several times faster on hardware with
low-precision units, and within a loose 1e-2 tolerance."""
import torch
import torch.nn as nn

EXPECT = "rejected/precision"
TASK = "matmul"


class ModelNew(nn.Module):
    def forward(self, A, B):
        return (A.bfloat16() @ B.bfloat16()).float()
