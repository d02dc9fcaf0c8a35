"""Turns cuDNN autotuning on: a speed-only setting. Allowed; the reference is timed under it
too, so it earns nothing by itself, and the verdict lists it."""
import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "conv_bias_relu_scale"
SET_FLAGS = ["cudnn_benchmark"]

torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias) * self.scale
