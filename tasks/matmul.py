import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for square fp32 matrices."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
N = 4096 if ON_GPU else 100 if INTERPRETED else 384


def get_inputs():
    # Zero-mean inputs: a precision shortcut (fp16, TF32) shows as a large relative error.
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
