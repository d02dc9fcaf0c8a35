"""The task's forward, but its parameters are created in another order than Model's, so from
the same seed it draws other weights: right with the reference's weights, wrong with its own.
With allow_init_mismatch it is accepted with the reference's weights, and flagged."""
import torch
import torch.nn as nn

EXPECT = "ok"
OPTIONS = {"allow_init_mismatch": True}
FLAGS = ["init_mismatch"]
TASK = "conv_bias_relu_scale"


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias) * self.scale
