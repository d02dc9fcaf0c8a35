"""Folds the task's constant scale into its weights at construction: relu(s * z) = s * relu(z)
for s > 0, so the multiply disappears from forward. Legitimate; it only works if the harness
does not overwrite the candidate's weights with the reference's."""
import torch
import torch.nn as nn

EXPECT = "ok"
TASK = "conv_bias_relu_scale"


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        with torch.no_grad():
            self.conv.weight.mul_(scale)
            self.conv.bias.mul_(scale)
            self.bias.mul_(scale)

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)
