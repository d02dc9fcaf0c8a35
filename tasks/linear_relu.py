import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b): a matmul followed by a bias and an activation."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, in_features, out_features = ((2048, 8192, 4096) if ON_GPU else (16, 100, 70) if INTERPRETED
                                         else (128, 512, 512))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
