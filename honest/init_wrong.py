"""Initializes as Model does, but its forward is wrong (a 1.5x scale): wrong with its own
weights and with the reference's, so the mismatch stands (not init_mismatch)."""
import torch
import torch.nn as nn

EXPECT = "incorrect/mismatch"
TASK = "conv_bias_relu_scale"


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias) * self.scale * 1.5
