"""Turns TF32 on for the whole process: its own matmuls get faster, and so would the
reference's, hiding a precision change."""
import torch
import torch.nn as nn

EXPECT = "rejected/global_flag|precision"
TASK = "matmul"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.backends.cuda.matmul.allow_tf32 = True

    def forward(self, A, B):
        return A @ B
