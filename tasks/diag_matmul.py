import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """diag(a) @ B, written the slow way: the N x N diagonal matrix is built and multiplied."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(a) @ B


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
N, M = (4096, 4096) if ON_GPU else (100, 70) if INTERPRETED else (512, 512)


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
