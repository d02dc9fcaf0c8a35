import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x * sigmoid(x) + bias: three elementwise ops that eager PyTorch runs as three passes."""

    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x) + self.bias


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, dim = (16384, 16384) if ON_GPU else (16, 1000) if INTERPRETED else (512, 2048)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
