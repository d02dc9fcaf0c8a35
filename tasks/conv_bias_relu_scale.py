import os

import torch
import torch.nn as nn


class Model(nn.Module):
    """3x3 convolution (padding 1), plus a per-channel bias, ReLU, then a constant scale."""

    def __init__(self, in_channels: int, out_channels: int, scale: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.relu(x + self.bias)
        return x * self.scale


ON_GPU = os.environ.get("KERNELS_DEVICE", "cuda") == "cuda"
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter: a program at a time, in numpy
batch_size, in_channels, out_channels, size = ((32, 64, 128, 128) if ON_GPU else (2, 8, 16, 16) if INTERPRETED
                                               else (4, 16, 32, 32))
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, scale]
